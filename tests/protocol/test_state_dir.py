"""State directory damage (B01, C04): loose permissions are tightened, a folder or file owned
by another user is refused with a clear error, unreadable files give a clear error, and a
listening file that cannot be trusted leads to a fresh launch. (Truncated, non-JSON and
other-protocol listening files, and missing launch.json/token: tests/host/test_launcher.py,
tests/bridge/test_bridge_program.py.)
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading

import pytest
from websockets.sync.server import serve

import bridge_client as bc
from bridge_client.state_dir import identity
from bridge_harness import REPO, TOKEN, BridgeProcess, prepare_state
from host_support import options, session_options

pytestmark = pytest.mark.timeout(60)


def _mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _run_bridge(state: str, workspace: str, timeout: float = 20.0) -> subprocess.CompletedProcess:
    env = dict(os.environ, **{identity.STATE_DIR_ENV: state, "PYTHONPATH": REPO})
    os.makedirs(workspace, exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "bridge_client.bridge", "--driver", "echo"],
        env=env,
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_b01_loose_permissions_are_tightened_before_serving(tmp_path):
    state = str(tmp_path / "state")
    prepare_state(state)
    os.chmod(state, 0o755)
    os.chmod(os.path.join(state, identity.TOKEN_FILE), 0o644)
    os.chmod(os.path.join(state, identity.LAUNCH_FILE), 0o640)  # (writable by others is refused: C21)
    bridge = BridgeProcess(state, str(tmp_path / "ws")).start()
    try:
        assert _mode(state) == 0o700
        assert _mode(os.path.join(state, identity.TOKEN_FILE)) == 0o600
        assert _mode(os.path.join(state, identity.LAUNCH_FILE)) == 0o600
        for name in os.listdir(state):
            path = os.path.join(state, name)
            if os.path.isfile(path):
                assert _mode(path) & 0o077 == 0, f"{name} is private"
        assert "readable by others" in bridge.log()
        with bridge.connect() as c:
            assert c.value("Hello")["agentId"] == "echo"
    finally:
        bridge.stop()


@pytest.mark.skipif(os.geteuid() != 0, reason="making a folder owned by another user needs root")
@pytest.mark.parametrize("what", ["folder", "token"])
def test_b01_state_owned_by_another_user_is_refused_with_a_clear_error(tmp_path, what):
    state = str(tmp_path / "state")
    prepare_state(state)
    target = state if what == "folder" else os.path.join(state, identity.TOKEN_FILE)
    os.chown(target, 65534, 65534)
    done = _run_bridge(state, str(tmp_path / "ws"))
    assert done.returncode == 2
    assert "belongs to user id 65534" in done.stderr + _log(state)
    assert not os.path.exists(os.path.join(state, identity.LISTENING_FILE))


def _log(state: str) -> str:
    data = identity.optional_read(os.path.join(state, identity.LOG_FILE))
    return (data or b"").decode("utf-8", "replace")


@pytest.mark.parametrize("name", [identity.TOKEN_FILE, identity.LAUNCH_FILE])
def test_b01_unreadable_token_or_launch_file_is_a_clear_error(tmp_path, name):
    state = str(tmp_path / "state")
    prepare_state(state)
    path = os.path.join(state, name)
    os.unlink(path)
    os.mkdir(path)  # unreadable as a file, whoever runs the test (root reads any mode)
    done = _run_bridge(state, str(tmp_path / "ws"))
    assert done.returncode == 2
    text = done.stderr + _log(state)
    assert "cannot read" in text and name in text
    assert "Traceback" not in text


def _plant(sandbox, session, data: bytes = None, port: int = None, directory: bool = False) -> str:
    path = os.path.join(identity.state_dir(sandbox.state_root, session.bridge_id), identity.LISTENING_FILE)
    if directory:
        os.makedirs(path)
        return path
    if data is None:
        info = identity.ListeningInfo(
            1, "echo", session.bridge_id, "127.0.0.1", port, 999999, "x", "2020-01-01T00:00:00Z"
        )
        data = info.to_json().encode()
    identity.secure_write(path, data)
    return path


def test_c04_listening_file_naming_a_websocket_server_that_is_no_bridge_gets_a_fresh_launch(sandbox):
    def garbage(ws):
        for _ in ws:
            ws.send("I am not a bridge")

    server = serve(garbage, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with bc.create_session(options("echo"), session_options(sandbox)) as session:
            _plant(sandbox, session, port=int(server.socket.getsockname()[1]))
            assert (
                "".join(p.text for p in session.turn("still works") if isinstance(p, bc.TextDelta))
                == "still works"
            )
            assert session.instance is not None
    finally:
        server.shutdown()
        thread.join(5)


def test_c04_listening_file_that_is_a_folder_is_a_clear_launch_error(sandbox):
    # The host cannot read it (ignored: no bridge there); the launched bridge cannot replace
    # it and exits with an error that the host reports with the log's tail.
    with bc.create_session(options("echo"), session_options(sandbox, launch_timeout=15.0)) as session:
        _plant(sandbox, session, directory=True)
        with pytest.raises(bc.BridgeLaunchError) as info:
            session.turn("x")
    assert "listening.json" in str(info.value) + str(getattr(info.value, "log_tail", ""))


def test_c17_token_file_rewritten_by_a_stranger_only_locks_out_that_token(tmp_path):
    # The bridge reads the token once at start: a token file changed later changes nothing.
    state = str(tmp_path / "state")
    prepare_state(state)
    bridge = BridgeProcess(state, str(tmp_path / "ws")).start()
    try:
        identity.secure_write(os.path.join(state, identity.TOKEN_FILE), b"stranger-token")
        with bridge.connect() as c:
            assert c.value("Hello")["agentId"] == "echo"
        import websocket

        with pytest.raises(websocket.WebSocketBadStatusException) as info:
            bridge.connect(token="stranger-token")
        assert info.value.status_code == 401
    finally:
        bridge.stop()
    assert TOKEN not in _log(state)

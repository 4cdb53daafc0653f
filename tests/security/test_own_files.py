"""C21 (trust only your own files), C17 and B01: the secret, the home folder, state
directories and the files in them are used only when they are this user's own regular files
and folders, not symlinks and not open to others; a listening file that fails this is no
bridge (the token is never sent to the port it names); a FIFO never blocks host or bridge;
a malformed token is refused where it is made. Real bridges, real files, real sockets.

Owner checks need a second user id: they run as root (``chown``) and are skipped otherwise.
"""
from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
import time
from typing import List

import pytest

import bridge_client as bc
from bridge_client.state_dir import identity
from bridge_client.paths import SECRET_ENV, default_secret
from bridge_client import redacted
from bridge_client.redacted import Redacted, hmac_token
from bridge_harness import REPO, prepare_state
from host_support import options, session_options

pytestmark = pytest.mark.timeout(60)

STRANGER = 65534  # nobody
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="files of another user need root (chown)")


def _texts(parts) -> str:
    return "".join(p.text for p in parts if isinstance(p, bc.TextDelta))


def _state_dir(sandbox: bc.LocalSandbox, session: bc.Session) -> str:
    return identity.state_dir(sandbox.state_root, session.bridge_id)


def _in_thread(fn, timeout: float = 25.0):
    """Run ``fn`` in a thread; fail (instead of hanging the suite) when it does not return."""
    box: List[object] = []

    def run() -> None:
        try:
            box.append(("ok", fn()))
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            box.append(("err", exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"blocked for more than {timeout} s"
    kind, value = box[0]
    if kind == "err":
        raise value  # type: ignore[misc]
    return value


def _run_bridge(state: str, workspace: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, **{identity.STATE_DIR_ENV: state, "PYTHONPATH": REPO})
    os.makedirs(workspace, exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "bridge_client.bridge", "--driver", "echo"],
        env=env, cwd=workspace, capture_output=True, text=True, timeout=20,
    )


# ----------------------------------------------------------------------------- FIFOs (item 6)


def test_c20_a_fifo_listening_file_does_not_block_the_host(sandbox, home):
    with bc.create_session(options("echo"), session_options(sandbox)) as session:
        state = _state_dir(sandbox, session)
        identity.make_private_dirs(state, home)
        os.mkfifo(os.path.join(state, identity.LISTENING_FILE), 0o600)
        # Treated as no bridge: the launched bridge replaces it with its own file.
        assert _texts(_in_thread(lambda: list(session.turn("through")))) == "through"


def test_c20_a_fifo_listening_file_does_not_keep_the_bridge_from_stopping(make_bridge):
    bridge = make_bridge()
    os.unlink(bridge.listening_path)
    os.mkfifo(bridge.listening_path, 0o600)
    bridge.signal(15)
    assert bridge.wait(10) == 0, bridge.log()


def test_c21_sandbox_reads_never_block_on_a_fifo(sandbox, tmp_path):
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo, 0o600)
    with pytest.raises(OSError):
        _in_thread(lambda: sandbox.read_file(fifo))
    with pytest.raises(bc.UntrustedFile):
        _in_thread(lambda: identity.optional_read(fifo))


# ----------------------------------------------------------------------------- tokens (item 8)


@pytest.mark.parametrize(
    "value, says",
    [
        ("a" * 64 + "\n", "line break"),
        (" " + "a" * 64, "whitespace"),
        ("ab cd", "whitespace"),
        ("jeton-é", "non-ASCII"),
        ("x" * 8192, "8192 characters"),
        ("ab=cd", "'='"),
    ],
)
def test_c17_a_malformed_token_is_refused_at_once_with_what_is_wrong(sandbox, value, says):
    opts = options("echo", token=lambda sandbox_id: Redacted(value))
    started = time.monotonic()
    with pytest.raises(bc.InvalidToken) as info:
        bc.create_session(opts, session_options(sandbox, launch_timeout=3.0))
    assert time.monotonic() - started < 2.5  # no launch, no 3 s launch timeout
    assert says in str(info.value)
    assert value.strip() not in str(info.value) or len(value.strip()) < 3  # never shows it
    with pytest.raises(bc.InvalidToken):
        Redacted.token(value)


def test_c17_token_functions_must_give_redacted_bearer_tokens(sandbox):
    with pytest.raises(bc.InvalidToken):
        bc.create_session(options("echo", token=lambda s: "plain-str"), session_options(sandbox))
    assert redacted.check_token(hmac_token("s")("sandbox-1")).reveal().isalnum()
    assert Redacted.token("abc-._~+/==").reveal() == "abc-._~+/=="


def test_c17_the_bridge_refuses_a_malformed_token_file_with_a_clear_error(tmp_path):
    state = str(tmp_path / "state")
    prepare_state(state, token="two words")
    done = _run_bridge(state, str(tmp_path / "ws"))
    assert done.returncode == 2
    assert "whitespace" in done.stderr and identity.TOKEN_FILE in done.stderr
    assert "two words" not in done.stderr


# ----------------------------------------------------------------------------- owners and modes (item 10)


@needs_root
def test_c21_a_secret_of_another_user_is_refused(home, monkeypatch):
    monkeypatch.delenv(SECRET_ENV)
    path = os.path.join(home, "secret")
    with open(path, "w") as f:
        f.write("theirs")
    os.chmod(path, 0o600)
    os.chown(path, STRANGER, STRANGER)
    with pytest.raises(bc.UntrustedFile) as info:
        default_secret()
    assert f"user id {STRANGER}" in str(info.value) and "theirs" not in str(info.value)


@needs_root
def test_c21_a_home_folder_of_another_user_is_refused(home, monkeypatch):
    monkeypatch.delenv(SECRET_ENV)
    os.chown(home, STRANGER, STRANGER)
    with pytest.raises(bc.UntrustedFile) as info:
        default_secret()
    assert home in str(info.value) and f"user id {STRANGER}" in str(info.value)
    assert not os.path.exists(os.path.join(home, "secret"))


@pytest.mark.parametrize("mode", [0o775, 0o757, 0o777])
def test_c21_a_home_folder_others_can_write_is_refused(home, monkeypatch, mode):
    monkeypatch.delenv(SECRET_ENV)
    os.chmod(home, mode)
    with pytest.raises(bc.UntrustedFile) as info:
        default_secret()
    assert "writable by others" in str(info.value) and "chmod 700" in str(info.value)


@pytest.mark.parametrize("how", ["symlink", "group-writable"])
def test_c21_a_secret_that_is_a_symlink_or_writable_by_others_is_refused(home, monkeypatch, tmp_path, how):
    monkeypatch.delenv(SECRET_ENV)
    path = os.path.join(home, "secret")
    if how == "symlink":
        target = tmp_path / "planted"
        target.write_text("chosen-by-someone")
        os.chmod(target, 0o600)
        os.symlink(target, path)
    else:
        with open(path, "w") as f:
            f.write("mine")
        os.chmod(path, 0o620)
    with pytest.raises(bc.UntrustedFile):
        default_secret()


@needs_root
def test_c21_a_state_folder_of_another_user_gets_no_token(sandbox, home):
    with bc.create_session(options("echo"), session_options(sandbox, launch_timeout=5.0)) as session:
        theirs = sandbox.state_root  # <home>/sandboxes/<sandbox id>, made by someone else
        os.makedirs(theirs, mode=0o700)
        os.chown(theirs, STRANGER, STRANGER)
        with pytest.raises(bc.BridgeLaunchError) as info:
            session.turn("x")
    assert f"user id {STRANGER}" in str(info.value)
    assert not os.path.exists(os.path.join(_state_dir(sandbox, session), identity.TOKEN_FILE))


# ----------------------------------------------------------------------------- listening file (item 11)


class _TokenTrap:
    """A TCP server that records what connects to it (a stranger's port in a planted file)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = int(self.sock.getsockname()[1])
        self.received = b""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1.0)
                try:
                    self.received += conn.recv(65536)
                except OSError:
                    pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


@pytest.mark.parametrize("how", ["mode-0644", "state-dir-0777", "another-user", "symlink"])
def test_c21_an_untrusted_listening_file_gets_no_token_and_is_logged(sandbox, home, tmp_path, caplog, how):
    if how == "another-user" and os.geteuid() != 0:
        pytest.skip("files of another user need root (chown)")
    trap = _TokenTrap()
    try:
        with bc.create_session(options("echo"), session_options(sandbox)) as session:
            state = _state_dir(sandbox, session)
            identity.make_private_dirs(state, home)
            path = os.path.join(state, identity.LISTENING_FILE)
            info = identity.ListeningInfo(
                1, "echo", session.bridge_id, "127.0.0.1", trap.port, os.getpid(), "planted",
                "2020-01-01T00:00:00Z",
            )
            if how == "symlink":
                elsewhere = str(tmp_path / "planted.json")
                identity.secure_write(elsewhere, info.to_json().encode())
                os.symlink(elsewhere, path)
            else:
                identity.secure_write(path, info.to_json().encode())
            if how == "mode-0644":
                os.chmod(path, 0o644)
            elif how == "state-dir-0777":
                os.chmod(state, 0o777)  # anyone may have put it there: no launch either
            elif how == "another-user":
                os.chown(path, STRANGER, STRANGER)
            with caplog.at_level(logging.DEBUG, logger="bridge_client"):
                if how == "state-dir-0777":
                    with pytest.raises(bc.BridgeLaunchError) as refused:
                        session.turn("safe")
                    assert "writable by others" in str(refused.value)
                else:
                    assert _texts(session.turn("safe")) == "safe"  # a bridge of ours was launched
    finally:
        trap.close()
    assert b"Bearer" not in trap.received and b"GET" not in trap.received, "the token went to a stranger"
    warned = [r for r in caplog.records if r.name == "bridge_client" and "not trusting" in r.getMessage()]
    assert warned and warned[0].levelno == logging.WARNING


# ----------------------------------------------------------------------------- symlinks (item 12)


def test_c21_a_symlinked_state_directory_receives_no_token(sandbox, home, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    with bc.create_session(options("echo"), session_options(sandbox, launch_timeout=5.0)) as session:
        state = _state_dir(sandbox, session)
        identity.make_private_dirs(os.path.dirname(state), home)
        os.symlink(elsewhere, state)
        with pytest.raises(bc.BridgeLaunchError) as info:
            session.turn("x")
    assert "symlink" in str(info.value)
    assert os.listdir(elsewhere) == []


@pytest.mark.parametrize("name", [identity.LOCK_FILE, identity.LOG_FILE])
def test_c21_a_symlinked_lock_or_log_leaves_its_target_alone(sandbox, home, tmp_path, name):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious\n")
    with bc.create_session(options("echo"), session_options(sandbox, launch_timeout=10.0)) as session:
        state = _state_dir(sandbox, session)
        identity.make_private_dirs(state, home)
        os.symlink(victim, os.path.join(state, name))
        with pytest.raises(bc.BridgeLaunchError) as info:
            session.turn("x")
    assert "symlink" in str(info.value)
    assert victim.read_bytes() == b"precious\n"  # neither truncated nor appended to


@pytest.mark.parametrize("what", ["state", identity.TOKEN_FILE, identity.LAUNCH_FILE, identity.STORE_FILE])
def test_c21_the_bridge_refuses_symlinks_in_its_state_directory(tmp_path, what):
    real = str(tmp_path / "real")
    prepare_state(real)
    state = real
    if what == "state":
        state = str(tmp_path / "linked")
        os.symlink(real, state)
    else:
        moved = str(tmp_path / f"moved-{what}")
        path = os.path.join(real, what)
        if os.path.exists(path):
            os.rename(path, moved)
        else:
            open(moved, "wb").close()
        os.symlink(moved, path)
    done = _run_bridge(state, str(tmp_path / "ws"))
    assert done.returncode == 2, done.stderr
    assert "symlink" in done.stderr
    assert not os.path.exists(os.path.join(real, identity.LISTENING_FILE))

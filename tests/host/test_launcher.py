"""Finding the bridge, launching it, and refusing strangers (C04, C05, C17)."""
from __future__ import annotations

import dataclasses
import http.server
import os
import socket
import threading

import pytest

import bridge_client as bc
from bridge_client.state_dir import identity
from bridge_client.client import launcher
from bridge_client.client.connection import Connection
from host_support import options, session_options

pytestmark = pytest.mark.timeout(60)


def _listening_path(sandbox, session) -> str:
    return os.path.join(identity.state_dir(sandbox.state_root, session.bridge_id), identity.LISTENING_FILE)


def _write_stale_listening(path: str, port: int, pid: int = 999999) -> None:
    info = identity.ListeningInfo(
        1,
        "echo",
        os.path.basename(os.path.dirname(path)),
        "127.0.0.1",
        port,
        pid,
        "stale",
        "2020-01-01T00:00:00.000Z",
    )
    identity.secure_write(path, info.to_json().encode())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_turn(session) -> str:
    return [p for p in session.turn("ping")][-1].finish_reason


@pytest.mark.parametrize("stale", ["dead-port", "garbage", "truncated", "other-protocol"])
def test_c04_stale_listening_file_leads_to_a_fresh_launch(sandbox, stale):
    session = bc.create_session(options("echo"), session_options(sandbox))
    path = _listening_path(sandbox, session)
    if stale == "dead-port":
        _write_stale_listening(path, _free_port())
    else:
        content = {
            "garbage": b"not json at all",
            "truncated": b'{"protocol": 1, "port": 12',
            "other-protocol": b'{"protocol": 99}',
        }[stale]
        identity.secure_write(path, content)
    with session:
        assert _run_turn(session) == "stop"
        info = identity.parse_listening(open(path, "rb").read())
        assert info.instance != "stale" and info.pid == session._hello.pid


def test_c04_unrelated_http_server_on_the_port_leads_to_a_fresh_launch(sandbox):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        session = bc.create_session(options("echo"), session_options(sandbox))
        path = _listening_path(sandbox, session)
        _write_stale_listening(path, server.server_address[1], pid=os.getpid())
        with session:
            assert _run_turn(session) == "stop"
            assert session._hello.pid != os.getpid()
    finally:
        server.shutdown()
        server.server_close()


def test_c04_another_bridge_on_the_port_is_not_ours(sandbox):
    with bc.create_session(options("echo"), session_options(sandbox)) as first:
        _run_turn(first)
        theirs = identity.parse_listening(open(_listening_path(sandbox, first), "rb").read())
        second = bc.create_session(options("echo", agent_options={"steps": 2}), session_options(sandbox))
        # The second bridge's listening file names the first bridge's port: Hello tells them apart.
        _write_stale_listening(_listening_path(sandbox, second), theirs.port, pid=theirs.pid)
        with second:
            assert _run_turn(second) == "stop"
            assert second._hello.bridge_id == second.bridge_id != first.bridge_id
            assert second._hello.pid != theirs.pid


def test_c17_wrong_token_is_unauthorized_at_once_and_never_retried(sandbox):
    with bc.create_session(options("echo"), session_options(sandbox)) as good:
        _run_turn(good)
        info = identity.parse_listening(open(_listening_path(sandbox, good), "rb").read())
        with pytest.raises(bc.Unauthorized):
            Connection(sandbox.expose(info.port), bc.Redacted("wrong-token"), open_timeout=5)
        # A host with a wrong token for this live bridge's own state directory: the bridge it
        # launches loses the lock to the live one, whose port refuses the token: Unauthorized.
        # (A 401 from a stale file's port is no longer final: tests/resilience/
        # test_resilience_stale_files_and_handshakes.py.)
        plan = dataclasses.replace(good._plan, token=bc.Redacted("wrong-token"))
        with pytest.raises(bc.Unauthorized):
            launcher.connect(plan)
        assert _run_turn(good) == "stop", "the bridge still serves the good host"


def test_c04_a_bridge_that_cannot_start_raises_with_its_log(sandbox):
    opts = options("no_such_module:make")
    opts = bc.BridgeOptions(
        id="nope", template=bc.Template(), command=opts.command, args=opts.args, token=opts.token
    )
    with bc.create_session(opts, session_options(sandbox, launch_timeout=15)) as session:
        with pytest.raises(bc.BridgeLaunchError) as caught:
            session.turn("hello")
    assert "no_such_module" in caught.value.log_tail


def test_c04_template_failure_is_a_template_error(sandbox):
    template = bc.Template(
        (bc.TemplateStep("a thing", check=("false",), install=("sh", "-c", "echo broken >&2; exit 3")),)
    )
    base = options("echo")
    opts = bc.BridgeOptions(
        id="echo", template=template, command=base.command, args=base.args, token=base.token
    )
    with bc.create_session(opts, session_options(sandbox)) as session:
        with pytest.raises(bc.TemplateError, match="broken"):
            session.turn("hello")


def test_c04_c21_a_connect_to_a_running_bridge_reads_the_listening_file_once(sandbox, monkeypatch):
    # The bytes whose port is tried are the bytes compared with a refused file: one private
    # read per connect (it was two), still checked as the sandbox user's own file.
    first = bc.create_session(options("echo"), session_options(sandbox))
    try:
        assert _run_turn(first) == "stop"
        reads = []
        real = type(sandbox).read_private_file

        def counted(self, path):
            reads.append(os.path.basename(path))
            return real(self, path)

        monkeypatch.setattr(type(sandbox), "read_private_file", counted)
        with bc.create_session(options("echo"), session_options(sandbox)) as second:
            assert _run_turn(second) == "stop"
            assert second.instance == first.instance
        assert reads.count(identity.LISTENING_FILE) == 1
    finally:
        first.release()

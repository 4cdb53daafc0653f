"""C17, C01: the token never shows: not in repr or str of any object the host hands out, not
in log output at DEBUG level (ours, websocket-client's, the bridge's), not in exception
messages or tracebacks, not in listening.json or launch.json, not on the bridge's command
line or in its environment, and not in the environment of the processes its driver starts.
"""

from __future__ import annotations

import json
import logging
import os
import traceback

import pytest

import bridge_client as bc
from bridge_client.state_dir import identity
from bridge_client.client.connection import Connection
from host_support import SECRET, options, session_options

pytestmark = pytest.mark.timeout(60)


def _proc_text(pid: int, name: str) -> str:
    with open(f"/proc/{pid}/{name}", "rb") as f:
        return f.read().replace(b"\0", b" ").decode("utf-8", "replace")


def test_c17_the_token_never_shows_anywhere_in_a_whole_session(sandbox, workspace, caplog):
    caplog.set_level(logging.DEBUG)  # every logger, the libraries' too
    opts = options("shell")
    token = opts.token(sandbox.id).reveal()
    secrets = (token, SECRET)
    seen = []  # every text that must not hold a secret, with where it came from
    with bc.create_session(opts, session_options(sandbox)) as session:
        env_turn = session.turn("env")
        parts = list(env_turn)
        # A command's parent is its keeper, whose parent is the bridge: both are read.
        turn = session.turn(
            "G=$(cut -d' ' -f4 /proc/$PPID/stat); cat /proc/$PPID/cmdline /proc/$G/cmdline | tr '\\0' ' '\n"
            "G=$(cut -d' ' -f4 /proc/$PPID/stat); cat /proc/$PPID/environ /proc/$G/environ | tr '\\0' ' '"
        )
        parts += list(turn)
        state_dir = identity.state_dir(sandbox.state_root, session.bridge_id)
        listening = identity.parse_listening(
            sandbox.read_file(os.path.join(state_dir, identity.LISTENING_FILE))
        )
        seen += [
            ("cmdline", _proc_text(listening.pid, "cmdline")),
            ("environ", _proc_text(listening.pid, "environ")),
        ]
        for name in (identity.LISTENING_FILE, identity.LAUNCH_FILE):
            seen.append((name, sandbox.read_file(os.path.join(state_dir, name)).decode()))
        objects = [session, opts, turn, turn.state, session.state, sandbox, sandbox.expose(listening.port)]
        conn = Connection(sandbox.expose(listening.port), opts.token(sandbox.id), open_timeout=10)
        objects += [conn, opts.token(sandbox.id), opts.token]
        conn.close()
        seen += [(f"repr {type(o).__name__}", repr(o)) for o in objects]
        seen += [(f"str {type(o).__name__}", str(o)) for o in objects]
        seen += [(f"format {type(o).__name__}", f"{o!s} {o!r} {o}") for o in objects]
        # A wrong token: the error and its traceback name neither token.
        wrong = bc.Redacted("wrong-" + token[:8])
        try:
            Connection(sandbox.expose(listening.port), wrong, open_timeout=10)
        except bc.Unauthorized as exc:
            seen.append(
                ("Unauthorized", "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
            )
            assert wrong.reveal() not in seen[-1][1]
        else:
            raise AssertionError("a wrong token was accepted")
        seen.append(("released state", repr(session.release())))
    seen.append(("parts", json.dumps([p.to_dict() for p in parts])))
    seen.append(
        (
            "bridge.log",
            sandbox.read_file(os.path.join(state_dir, identity.LOG_FILE)).decode("utf-8", "replace"),
        )
    )
    seen.append(("host log at DEBUG", caplog.text))
    # The driver's commands ran, and saw their parent's command line and environment.
    assert "PATH=" in env_turn.text() and "bridge_client.bridge" in turn.text(), turn.text()[-2000:]
    assert "BRIDGE_CLIENT_" not in env_turn.text(), "no bridge variable reaches the driver's children"
    assert caplog.text, "DEBUG logging was captured"
    for where, text in seen:
        for secret in secrets:
            assert secret not in text, f"a secret shows in {where}"


def test_c17_token_file_and_launch_file_are_separate_and_only_the_token_file_holds_it(sandbox):
    opts = options("echo")
    token = opts.token(sandbox.id).reveal()
    with bc.create_session(opts, session_options(sandbox)) as session:
        list(session.turn("hi"))
        state_dir = identity.state_dir(sandbox.state_root, session.bridge_id)
        holders = []
        for name in sorted(os.listdir(state_dir)):
            path = os.path.join(state_dir, name)
            if os.path.isfile(path):
                with open(path, "rb") as f:
                    if token.encode() in f.read():
                        holders.append(name)
    assert holders == [identity.TOKEN_FILE], (
        "the token is stored in the token file only (not the store, not the log)"
    )
    assert token not in session.bridge_id, "the bridge id reveals nothing of the token (C03)"


def test_c17_the_bridge_server_at_debug_level_logs_no_token(caplog):
    # Found by this test: websockets logs every upgrade header at DEBUG, Authorization too.
    import threading

    import websocket

    from bridge_client.bridge.server import BridgeServer

    caplog.set_level(logging.DEBUG)
    token = "bridge-debug-secret-" + "7" * 16
    manager = type(
        "NoTurns", (), {n: None for n in (
            "open_session", "start_turn", "cancel_turn", "close_session", "answer_approval", "send_message",
            "claim_host_tool", "answer_host_tool",
        )}
    )
    server = BridgeServer(manager(), token=bc.Redacted(token), hello={"agentId": "x"})
    port = server.start()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        ws = websocket.create_connection(f"ws://127.0.0.1:{port}/", header=[f"Authorization: Bearer {token}"])
        ws.send('{"_tag":"Request","id":1,"tag":"Hello","payload":null,"headers":[]}')
        assert '"agentId":"x"' in ws.recv()
        ws.close()
        with pytest.raises(websocket.WebSocketBadStatusException):
            websocket.create_connection(
                f"ws://127.0.0.1:{port}/", header=[f"authorization: Bearer {token}-wrong"]
            )
    finally:
        server.shutdown()
        thread.join(5)
    assert "Authorization" in caplog.text or "authorization" in caplog.text, (
        "the headers were logged, redacted"
    )
    assert token not in caplog.text


@pytest.mark.parametrize("path", ["websocket-client", "direct"])
def test_c17_the_host_with_websocket_client_trace_on_logs_no_token(sandbox, caplog, monkeypatch, path):
    import websocket

    from bridge_client.client import transport

    if path == "websocket-client":
        # A direct ws:// URL is upgraded by plain_ws; TLS and proxied URLs by websocket-client,
        # whose connect this takes for the local bridge too.
        real = transport.open_options

        def without_socket(*args, **kw):  # type: ignore[no-untyped-def]
            how = real(*args, **kw)
            sock = how.pop("socket", None)
            if sock is not None:
                sock.close()
            return how

        monkeypatch.setattr(transport, "open_options", without_socket)
    caplog.set_level(logging.DEBUG)
    websocket.enableTrace(True, handler=logging.NullHandler())
    try:
        opts = options("echo")
        with bc.create_session(opts, session_options(sandbox)) as session:
            list(session.turn("traced"))
    finally:
        websocket.enableTrace(False)
        logging.getLogger("websocket").setLevel(logging.NOTSET)
    if path == "websocket-client":
        assert "request header" in caplog.text, "websocket-client's trace was on"
    assert opts.token(sandbox.id).reveal() not in caplog.text

"""The host against a misbehaving bridge: a test server that sends garbage, never answers,
sends chunks for ids nobody asked for, closes mid-frame, or answers Hello as somebody else.
Each gives a typed error of this package (ProtocolError, BridgeMismatch, ConnectionLost,
Unauthorized), at once or within the keepalive bound; never a hang, never a deep library
traceback.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import traceback
from typing import Any, Callable, Iterator, Optional

import pytest
from websockets.sync.server import ServerConnection, serve

import bridge_client as bc
from bridge_client.state_dir import identity
from bridge_client.client.connection import END, Connection
from bridge_client.client.launcher import LaunchPlan, _check_hello, find
from bridge_client.errors import ConnectionLost, HarnessError, ProtocolError
from bridge_client.sandbox.base import Endpoint
from bridge_client.template import Template
from bridge_client.wire.frames import parse_frame
from bridge_client.wire.parts import HelloResult

pytestmark = pytest.mark.timeout(60)

TOKEN = bc.Redacted("misbehaving-test-token")
Behaviour = Callable[[ServerConnection, Any], None]

HELLO = {
    "agentId": "echo",
    "bridgeId": "0" * 32,
    "instance": "i-1",
    "protocol": 1,
    "pid": 4242,
    "startedAt": "2026-01-01T00:00:00.000Z",
}


def _exit(request_id: Any, value: Any) -> str:
    return json.dumps({"_tag": "Exit", "requestId": request_id, "exit": {"_tag": "Success", "value": value}})


class FakeBridge:
    """A WebSocket server on loopback whose answer to each host frame is ``behaviour``."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.received: list = []
        self._server = serve(self._handle, "127.0.0.1", 0, compression=None)
        self.port = int(self._server.socket.getsockname()[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(f"ws://127.0.0.1:{self.port}/")

    def _handle(self, ws: ServerConnection) -> None:
        try:
            for data in ws:
                for message in parse_frame(data):  # the host may send a batch (a JSON array)
                    self.received.append(message)
                    if message.get("_tag") == "Request":
                        self.behaviour(ws, message)
        except Exception:
            pass  # the host went away, or the behaviour closed the socket on purpose

    def close(self) -> None:
        self._server.shutdown()
        self._thread.join(5)


@pytest.fixture
def fake() -> Iterator[Callable[[Behaviour], FakeBridge]]:
    made = []

    def make(behaviour: Behaviour) -> FakeBridge:
        made.append(FakeBridge(behaviour))
        return made[-1]

    yield make
    for server in made:
        server.close()


def _connect(server: FakeBridge, **kw: Any) -> Connection:
    kw.setdefault("open_timeout", 5.0)
    kw.setdefault("ping_interval", 0.3)
    kw.setdefault("ping_timeout", 0.7)
    return Connection(server.endpoint, TOKEN, **kw)


def _shallow(exc: BaseException) -> None:
    """The error is ours, and its traceback shows no library internals."""
    assert isinstance(exc, HarnessError), repr(exc)
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    assert "site-packages" not in text, text
    assert TOKEN.reveal() not in text


def _raises(kind: type, fn: Callable[[], Any]) -> BaseException:
    with pytest.raises(kind) as info:
        fn()
    _shallow(info.value)
    return info.value


def _send_garbage(ws: ServerConnection, message: Any) -> None:
    ws.send("this is not json")


def _silent(ws: ServerConnection, message: Any) -> None:
    pass


@pytest.mark.parametrize(
    "answer, match",
    [
        ("this is not json", "not JSON"),
        ('{"_tag":"Exit","requestId":"1"}', "exit"),
        ('{"_tag":"Exit","requestId":"1","exit":{"_tag":"Maybe"}}', "exit _tag"),
        ('{"_tag":"Chunk","requestId":"1","values":[]}', "non-empty"),
        ('{"_tag":"Launch"}', "unknown message _tag"),
        ('{"_tag":"Request","id":1,"tag":"Hello","payload":null,"headers":[]}', "unknown message _tag"),
        ("[" * 100_000 + "]" * 100_000, "nested"),
        ('"just a string"', "object"),
    ],
    ids=[
        "not-json",
        "exit-without-exit",
        "unknown-exit",
        "empty-chunk",
        "unknown-tag",
        "request-from-bridge",
        "deep",
        "scalar",
    ],
)
def test_b08_garbage_from_the_bridge_is_a_protocol_error(fake, answer, match):
    server = fake(lambda ws, message: ws.send(answer))
    conn = _connect(server)
    try:
        error = _raises(ProtocolError, lambda: conn.call("Hello", None, timeout=10))
        assert match.lower() in str(error).lower()
        assert conn.closed, "a connection that heard garbage is not used again"
        _raises(ConnectionLost, lambda: conn.call("Hello", None, timeout=10))
    finally:
        conn.close()


@pytest.mark.parametrize(
    "answer",
    ['{"_tag":"Defect","defect":"the bridge is confused"}', '{"_tag":"ClientProtocolError","error":"bad"}'],
    ids=["defect", "client-protocol-error"],
)
def test_b08_a_defect_ends_the_connection_and_its_requests_are_lost_not_failed(fake, answer):
    # A Defect is not pinned on a request: it ends the connection's state, and what was pending
    # fails with ConnectionLost, which a session sends again over a new connection (C08;
    # docs/protocol.md). tests/resilience/test_resilience_host_read_loop.py reads a turn through one.
    server = fake(lambda ws, message: ws.send(answer))
    conn = _connect(server)
    try:
        error = _raises(ConnectionLost, lambda: conn.call("Hello", None, timeout=10))
        assert "defect" in str(error).lower()
        assert conn.closed, "a connection that heard a Defect is not used again"
    finally:
        conn.close()


def test_b08_binary_garbage_and_bad_utf8_from_the_bridge_are_protocol_errors(fake):
    server = fake(lambda ws, message: ws.send(b"\xff\xfe\xfd not utf-8"))
    conn = _connect(server)
    try:
        _raises(ProtocolError, lambda: conn.call("Hello", None, timeout=10))
    finally:
        conn.close()


def test_b08_a_bridge_that_never_answers_is_lost_within_the_timeout(fake):
    server = fake(_silent)
    conn = _connect(server)
    try:
        error = _raises(ConnectionLost, lambda: conn.call("Hello", None, timeout=1.0))
        assert "no answer" in str(error)
    finally:
        conn.close()


def test_b08_a_silent_bridge_that_never_pongs_is_lost_within_the_keepalive_bound(fake):
    # No answer and no Pong: the reader declares the connection lost after ping_interval +
    # ping_timeout of silence (1 s here), and the call without its own timeout ends too.
    server = fake(_silent)
    conn = _connect(server)
    try:
        error = _raises(ConnectionLost, lambda: conn.call("Hello", None, timeout=None))
        assert "no frame" in str(error)
    finally:
        conn.close()
    assert any(m.get("_tag") == "Ping" for m in server.received), "the host pinged"


def test_b08_chunks_and_exits_for_unknown_ids_are_ignored(fake):
    def behaviour(ws: ServerConnection, message: Any) -> None:
        ws.send(json.dumps({"_tag": "Chunk", "requestId": "999", "values": [{"x": 1}]}))
        ws.send(json.dumps({"_tag": "Chunk", "requestId": 999, "values": [{"x": 1}]}))
        ws.send(_exit("12345", "not yours"))
        ws.send(json.dumps({"_tag": "Chunk", "requestId": message["id"], "values": [1, 2]}))  # not a stream
        ws.send(json.dumps({"_tag": "Pong"}))
        ws.send(_exit(message["id"], HELLO))

    conn = _connect(fake(behaviour))
    try:
        assert conn.call("Hello", None, timeout=10) == HELLO
        assert not conn.closed
    finally:
        conn.close()


def test_b08_a_stream_with_chunks_for_other_ids_delivers_only_its_own(fake):
    def behaviour(ws: ServerConnection, message: Any) -> None:
        rid = message["id"]
        ws.send(json.dumps({"_tag": "Chunk", "requestId": rid, "values": [{"n": 0}]}))
        ws.send(json.dumps({"_tag": "Chunk", "requestId": "other", "values": [{"n": -1}]}))
        ws.send(json.dumps({"_tag": "Chunk", "requestId": rid, "values": [{"n": 1}, {"n": 2}]}))
        ws.send(_exit(rid, None))

    conn = _connect(fake(behaviour))
    try:
        stream = conn.stream("ReadTurn", {})
        values = []
        while True:
            got = stream.take(timeout=10)
            if got is END:
                break
            values.extend(got)
        assert values == [{"n": 0}, {"n": 1}, {"n": 2}]
    finally:
        conn.close()


def test_b08_a_bridge_that_closes_mid_frame_is_a_lost_connection(fake):
    def behaviour(ws: ServerConnection, message: Any) -> None:
        # The header of an unmasked text frame of 200 bytes, then 10 bytes, then the socket ends.
        ws.socket.sendall(bytes([0x81, 126, 0, 200]) + b'{"_tag":"E')
        ws.socket.shutdown(socket.SHUT_RDWR)
        ws.socket.close()

    conn = _connect(fake(behaviour))
    try:
        _raises(ConnectionLost, lambda: conn.call("Hello", None, timeout=10))
    finally:
        conn.close()


def test_b08_a_bridge_that_closes_cleanly_mid_request_is_a_lost_connection(fake):
    conn = _connect(fake(lambda ws, message: ws.close(1011, "going away")))
    try:
        _raises(ConnectionLost, lambda: conn.call("Hello", None, timeout=10))
    finally:
        conn.close()


def test_b08_a_server_that_accepts_tcp_but_never_upgrades_is_lost_within_open_timeout():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        _raises(
            ConnectionLost, lambda: Connection(Endpoint(f"ws://127.0.0.1:{port}/"), TOKEN, open_timeout=0.5)
        )


def _plan(sandbox: Any, bridge_id: str) -> LaunchPlan:
    return LaunchPlan(
        sandbox=sandbox,
        agent_id="echo",
        bridge_id=bridge_id,
        command="false",
        args=(),
        template=Template(()),
        agent_options=None,
        token=TOKEN,
        open_timeout=5.0,
        ping_interval=0.3,
        ping_timeout=2.0,
    )


@pytest.mark.parametrize(
    "changes",
    [{"agentId": "someone-else"}, {"bridgeId": "f" * 32}, {"protocol": 2}],
    ids=["agent-id", "bridge-id", "protocol"],
)
def test_b07_hello_from_somebody_else_is_a_bridge_mismatch_and_not_used(fake, sandbox, changes):
    server = fake(lambda ws, message: ws.send(_exit(message["id"], {**HELLO, **changes})))
    plan = _plan(sandbox, HELLO["bridgeId"])
    info = identity.ListeningInfo(
        1, "echo", plan.bridge_id, "127.0.0.1", server.port, 4242, "i-1", HELLO["startedAt"]
    )
    identity.secure_write(plan.path(identity.LISTENING_FILE), info.to_json().encode())
    # The launcher's check raises BridgeMismatch, and find() does not use that port (C04).
    conn = _connect(server)
    try:
        hello = HelloResult.from_dict(conn.call("Hello", None, timeout=10))
    finally:
        conn.close()
    _raises(bc.BridgeMismatch, lambda: _check_hello(plan, hello))
    assert find(plan) is None


@pytest.mark.parametrize(
    "value",
    [None, "hello", {"agentId": "echo"}, {**HELLO, "pid": "4242"}, {**HELLO, "protocol": 2**80}],
    ids=["null", "string", "partial", "pid-string", "huge-protocol"],
)
def test_b07_a_malformed_hello_is_a_protocol_error_and_not_used(fake, sandbox, value):
    server = fake(lambda ws, message: ws.send(_exit(message["id"], value)))
    conn = _connect(server)
    try:
        raw = conn.call("Hello", None, timeout=10)
    finally:
        conn.close()
    _raises(ProtocolError, lambda: HelloResult.from_dict(raw))
    plan = _plan(sandbox, HELLO["bridgeId"])
    info = identity.ListeningInfo(
        1, "echo", plan.bridge_id, "127.0.0.1", server.port, 4242, "i-1", HELLO["startedAt"]
    )
    identity.secure_write(plan.path(identity.LISTENING_FILE), info.to_json().encode())
    assert find(plan) is None


@pytest.mark.parametrize("status", [401, 403, 500, 200])
def test_c17_http_answers_instead_of_an_upgrade(status):
    import http.server

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"no")

        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        endpoint = Endpoint(f"ws://127.0.0.1:{httpd.server_address[1]}/")
        kind: Optional[type] = bc.Unauthorized if status == 401 else ConnectionLost
        error = _raises(kind, lambda: Connection(endpoint, TOKEN, open_timeout=5))
        assert TOKEN.reveal() not in str(error)
    finally:
        httpd.shutdown()
        thread.join(5)


def test_b08_a_bridge_that_ignores_back_pressure_is_a_protocol_error(fake):
    # After the host holds back its Ack (a full buffer), a bridge must wait; one that floods on
    # regardless would grow the host's memory without end.
    def behaviour(ws: ServerConnection, message: Any) -> None:
        values = [{"n": i} for i in range(1000)]
        for _ in range(200):
            ws.send(json.dumps({"_tag": "Chunk", "requestId": message["id"], "values": values}))
        ws.send(_exit(message["id"], None))

    conn = _connect(fake(behaviour), ping_timeout=10.0)
    try:
        stream = conn.stream("ReadTurn", {})
        import time

        time.sleep(1.0)  # the host reads the flood without taking any of it

        def drain() -> None:
            while stream.take(timeout=10) is not END:
                pass

        error = _raises(ProtocolError, drain)
        assert "back-pressure" in str(error)
    finally:
        conn.close()


def _chain(exc: BaseException) -> list:
    found, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        found.append(exc)
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    return found


@pytest.mark.parametrize(
    "mode, kind",
    [
        ("garbage", ProtocolError),
        ("bad-result", ProtocolError),
        ("die", ProtocolError),
        ("silent", bc.BridgeUnavailable),
    ],
)
def test_b08_a_session_whose_bridge_misbehaves_after_hello_gets_a_typed_error_in_bounded_time(
    fake, sandbox, mode, kind
):
    from host_support import options, session_options

    session = bc.create_session(
        options("echo"), session_options(sandbox, resend_window=3.0, ping_interval=0.5, ping_timeout=1.0)
    )

    def behaviour(ws: ServerConnection, message: Any) -> None:
        if message["tag"] == "Hello":
            ws.send(_exit(message["id"], {**HELLO, "bridgeId": session.bridge_id}))
        elif message["tag"] == "OpenSession":
            ws.send(_exit(message["id"], {"sessionId": session.id, "revision": 0, "data": None}))
        elif mode == "garbage":
            ws.send("{garbage")
        elif mode == "bad-result":
            ws.send(_exit(message["id"], {"turnId": 5}))
        elif mode == "die":
            ws.send(
                json.dumps(
                    {
                        "_tag": "Exit",
                        "requestId": message["id"],
                        "exit": {"_tag": "Failure", "cause": [{"_tag": "Die", "defect": "boom"}]},
                    }
                )
            )

    server = fake(behaviour)
    info = identity.ListeningInfo(1, "echo", session.bridge_id, "127.0.0.1", server.port, 4242, "i-1", "x")
    state_dir = identity.state_dir(sandbox.state_root, session.bridge_id)
    identity.secure_write(os.path.join(state_dir, identity.LISTENING_FILE), info.to_json().encode())
    try:
        with pytest.raises(kind) as error:
            session.turn("hello")
        assert all(isinstance(e, HarnessError) for e in _chain(error.value)), _chain(error.value)
    finally:
        session.release()

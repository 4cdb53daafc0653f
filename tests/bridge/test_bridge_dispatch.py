"""The envelope and the dispatch: Hello (B07), bad input (B08), ids, batches, pings."""
from __future__ import annotations

import json

import pytest
import websocket

from bridge_client.bridge.turn_log import MAX_CHUNK_VALUES
from bridge_client.wire import frames
from bridge_harness import BRIDGE_ID

pytestmark = pytest.mark.timeout(60)


def _next(c):
    """The next message, skipping nothing: tests assert exact sequences."""
    return c.recv()


def _still_works(c):
    c.send(frames.Ping())
    assert _next(c) == {"_tag": "Pong"}
    assert c.value("Hello")["agentId"] == "echo"


# ---------------------------------------------------------------------------- B07


def test_b07_hello_answers_with_agent_bridge_and_instance_ids(shared_echo):
    with shared_echo.connect() as c:
        hello = c.value("Hello")
    info = shared_echo.info
    assert len(hello.pop("generation")) == 32  # the store's generation (B10)
    assert hello == {
        "agentId": "echo",
        "bridgeId": BRIDGE_ID,
        "instance": info.instance,
        "protocol": 1,
        "pid": shared_echo.proc.pid,
        "startedAt": info.started_at,
    }


# ---------------------------------------------------------------------------- envelope


def test_ping_gets_pong(shared_echo):
    with shared_echo.connect() as c:
        c.send(frames.Ping())
        assert _next(c) == {"_tag": "Pong"}


def test_batch_array_is_accepted(shared_echo):
    with shared_echo.connect() as c:
        c.send(
            [{"_tag": "Ping"}, {"_tag": "Request", "id": 1, "tag": "Hello", "payload": None, "headers": []}]
        )
        assert _next(c) == {"_tag": "Pong"}
        message = _next(c)
        assert message["_tag"] == "Exit" and message["exit"]["_tag"] == "Success"


def test_binary_frame_is_read_as_utf8_json(shared_echo):
    with shared_echo.connect() as c:
        c.send(frames.encode(frames.Request(9, "Hello", None, ())).encode("utf-8"))
        message = _next(c)
        assert message["requestId"] == 9 and message["exit"]["value"]["agentId"] == "echo"


@pytest.mark.parametrize("request_id", [0, 7, 2**40, "a", "7", "req-1"])
def test_ids_echo_back_with_their_json_type(shared_echo, request_id):
    with shared_echo.connect() as c:
        c.request("Hello", None, request_id=request_id)
        message = _next(c)
        assert message["requestId"] == request_id
        assert type(message["requestId"]) is type(request_id)


def test_eof_and_acks_and_interrupts_for_unknown_ids_are_ignored(shared_echo):
    with shared_echo.connect() as c:
        c.send({"_tag": "Eof"})
        c.send(frames.Ack(12345))
        c.send(frames.Interrupt("nobody"))
        _still_works(c)


# ---------------------------------------------------------------------------- B08


@pytest.mark.parametrize(
    "frame",
    [
        "not json at all",
        "{",
        "42",
        "[]",
        '"a string"',
        json.dumps({"_tag": "Nonsense"}),
        json.dumps({"no": "tag"}),
        json.dumps({"_tag": "Request", "tag": "Hello", "payload": None, "headers": []}),  # no id
        json.dumps({"_tag": "Request", "id": 1.5, "tag": "Hello", "payload": None, "headers": []}),
        json.dumps({"_tag": "Ack"}),
        b"\xff\xfe not utf-8",
    ],
    ids=[
        "text",
        "truncated",
        "number",
        "empty-batch",
        "string",
        "unknown-tag",
        "no-tag",
        "no-id",
        "float-id",
        "ack-no-id",
        "bad-utf8",
    ],
)
def test_b08_bad_frame_gets_a_defect_and_the_connection_keeps_working(shared_echo, frame):
    with shared_echo.connect() as c:
        c.send(frame)
        message = _next(c)
        assert message["_tag"] == "Defect"
        assert isinstance(message["defect"], str) and message["defect"]
        _still_works(c)


@pytest.mark.parametrize(
    "bad_request",
    [
        {"_tag": "Request", "id": 5, "tag": "Hello", "headers": []},  # no payload
        {"_tag": "Request", "id": 5, "tag": "Hello", "payload": None},  # no headers
        {"_tag": "Request", "id": 5, "tag": "Hello", "payload": None, "headers": {"a": "b"}},
        {"_tag": "Request", "id": 5, "tag": "Hello", "payload": None, "headers": [["a"]]},
        {"_tag": "Request", "id": 5, "tag": "", "payload": None, "headers": []},
        {"_tag": "Request", "id": 5, "tag": 3, "payload": None, "headers": []},
    ],
    ids=["no-payload", "no-headers", "headers-object", "header-not-pair", "empty-tag", "tag-number"],
)
def test_b08_malformed_request_with_an_id_gets_die_for_that_id(shared_echo, bad_request):
    with shared_echo.connect() as c:
        c.send(bad_request)
        message = _next(c)
        assert message["_tag"] == "Exit" and message["requestId"] == 5
        (cause,) = message["exit"]["cause"]
        assert cause["_tag"] == "Die" and cause["defect"]
        _still_works(c)


def test_b08_unknown_rpc_gets_die(shared_echo):
    with shared_echo.connect() as c:
        (cause,) = c.causes("Explode", {"x": 1})
        assert cause["_tag"] == "Die" and "Explode" in cause["defect"]
        _still_works(c)


@pytest.mark.parametrize(
    "tag, payload",
    [
        ("OpenSession", 5),
        ("OpenSession", {}),
        ("OpenSession", {"sessionId": "../etc", "state": None}),
        ("OpenSession", {"sessionId": "s", "state": {"sessionId": "s", "revision": -1, "data": None}}),
        ("OpenSession", {"sessionId": "s", "state": {"sessionId": "other", "revision": 1, "data": None}}),
        ("StartTurn", {"sessionId": "s", "turnId": "t", "prompt": 5}),
        ("StartTurn", None),
        ("ReadTurn", {"sessionId": "s", "turnId": "t", "offset": -1, "afterStep": 0}),
        ("ReadTurn", {"sessionId": "s", "turnId": "t", "offset": "0", "afterStep": 0}),
        ("CancelTurn", ["s", "t"]),
        ("CloseSession", {"session": "s"}),
        ("StartTurn", {"sessionId": "s", "turnId": "t", "prompt": "lone \ud800 surrogate"}),
        ("OpenSession", {"sessionId": "s", "state": {"sessionId": "s", "revision": 9, "data": "\udfff"}}),
    ],
)
def test_b08_payload_of_the_wrong_shape_gets_bad_request(shared_echo, tag, payload):
    with shared_echo.connect() as c:
        (cause,) = c.causes(tag, payload)
        assert cause["_tag"] == "Fail"
        assert cause["error"]["_tag"] == "BadRequest" and cause["error"]["message"]
        _still_works(c)


def test_b08_unknown_session_and_turn_get_typed_errors(shared_echo, sid, tid):
    with shared_echo.connect() as c:
        (cause,) = c.causes("StartTurn", {"sessionId": sid, "turnId": tid, "prompt": "x"})
        assert cause["error"]["_tag"] == "SessionNotFound"
        (cause,) = c.causes("ReadTurn", {"sessionId": sid, "turnId": tid, "offset": 0, "afterStep": 0})
        assert cause["error"]["_tag"] == "SessionNotFound"
        (cause,) = c.causes("CloseSession", {"sessionId": sid})
        assert cause["error"]["_tag"] == "SessionNotFound"
        (cause,) = c.causes("CancelTurn", {"sessionId": sid, "turnId": tid})
        assert cause["error"]["_tag"] == "TurnNotFound"
        c.open(sid)
        (cause,) = c.causes("ReadTurn", {"sessionId": sid, "turnId": tid, "offset": 0, "afterStep": 0})
        assert cause["error"]["_tag"] == "TurnNotFound"
        _still_works(c)


def test_b08_bad_input_on_one_connection_does_not_touch_another(shared_echo, sid, tid):
    with shared_echo.connect() as good, shared_echo.connect() as bad:
        good.open(sid)
        bad.send("garbage")
        assert _next(bad)["_tag"] == "Defect"
        bad.send({"_tag": "Request", "id": 1, "tag": "Nope", "payload": None, "headers": []})
        assert _next(bad)["_tag"] == "Exit"
        assert good.start(sid, tid, "still fine") == "started"
        parts, _, exit_ = good.read(sid, tid)
        assert exit_ == {"_tag": "Success", "value": None}
        assert parts[-1]["type"] == "turn-finish"


def test_b08_over_long_frame_closes_only_that_connection_with_1009(shared_echo):
    with shared_echo.connect() as other:
        victim = shared_echo.connect()
        victim.ws.send("x" * (16 * 1024 * 1024 + 1))
        opcode, data = victim.ws.recv_data(control_frame=True)
        assert opcode == websocket.ABNF.OPCODE_CLOSE
        assert int.from_bytes(data[:2], "big") == 1009
        victim.ws.shutdown()
        _still_works(other)
    with shared_echo.connect() as again:
        _still_works(again)


def test_b08_duplicate_in_flight_request_id_gets_die_and_the_first_goes_on(make_bridge, sid, tid):
    # More parts than one Chunk carries (MAX_CHUNK_VALUES, MAX_CHUNK_BYTES), so that one is
    # in flight.
    n = 2 * MAX_CHUNK_VALUES + 500
    bridge = make_bridge(options={"chunks": n})
    with bridge.connect() as c:
        c.open(sid)
        c.start(sid, tid, "x" * n)
        payload = {"sessionId": sid, "turnId": tid, "offset": 0, "afterStep": 0}
        c.request("ReadTurn", payload, request_id=7)
        first = _next(c)
        assert first["_tag"] == "Chunk" and first["values"][-1]["type"] != "turn-finish"
        # Not acked yet: request 7 is in flight.
        c.request("Hello", None, request_id=7)
        dup = _next(c)
        assert dup["_tag"] == "Exit" and dup["requestId"] == 7
        assert dup["exit"]["cause"][0]["_tag"] == "Die"
        assert "in flight" in dup["exit"]["cause"][0]["defect"]
        # The first request goes on.
        parts = list(first["values"])
        while True:
            c.send(frames.Ack(7))
            message = _next(c)
            if message["_tag"] == "Exit":
                assert message["exit"] == {"_tag": "Success", "value": None}
                break
            parts.extend(message["values"])
        assert [p["index"] for p in parts] == list(range(len(parts)))
        assert parts[-1]["type"] == "turn-finish"

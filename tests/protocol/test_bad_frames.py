"""B08: every kind of bad frame, sent while the same connection streams a turn and another
connection reads it too. Each bad frame gets the answer PROTOCOL.md gives it; the stream on
the same connection and the reader on the other connection lose nothing; the bridge stays up
and logs no traceback. (Single bad frames on an idle connection: tests/bridge/test_bridge_dispatch.py.)
"""

from __future__ import annotations

import json
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest
import websocket

from bridge_client.wire import frames

pytestmark = pytest.mark.timeout(60)

STREAM_ID = "r-1"

Check = Callable[[List[Dict[str, Any]]], None]


def _defect(answers: List[Dict[str, Any]]) -> None:
    (answer,) = answers
    assert answer["_tag"] == "Defect" and isinstance(answer["defect"], str) and answer["defect"]


def _exit(request_id: Any, cause_tag: Optional[str], error_tag: Optional[str] = None) -> Check:
    def check(answers: List[Dict[str, Any]]) -> None:
        (answer,) = answers
        assert answer["_tag"] == "Exit"
        assert answer["requestId"] == request_id and type(answer["requestId"]) is type(request_id)
        if cause_tag is None:
            assert answer["exit"]["_tag"] == "Success"
            return
        (cause,) = answer["exit"]["cause"]
        assert cause["_tag"] == cause_tag
        if error_tag is not None:
            assert cause["error"]["_tag"] == error_tag and cause["error"]["message"]

    return check


def _nothing(answers: List[Dict[str, Any]]) -> None:
    assert answers == []


def _request(request_id: Any, tag: str, payload: Any = None, **extra: Any) -> str:
    return json.dumps(
        {"_tag": "Request", "id": request_id, "tag": tag, "payload": payload, "headers": [], **extra}
    )


# (name, frame, how many answers it gets, check)
BAD: List[Tuple[str, Any, int, Check]] = [
    ("not JSON", "this is not json", 1, _defect),
    ("truncated JSON", '{"_tag":"Request","id":', 1, _defect),
    ("a JSON number", "42", 1, _defect),
    ("a JSON string", '"Ping"', 1, _defect),
    ("an empty batch", "[]", 1, _defect),
    ("no _tag", json.dumps({"id": 1}), 1, _defect),
    ("unknown _tag", json.dumps({"_tag": "Explode", "requestId": 1}), 1, _defect),
    (
        "a bridge message sent by a host",
        json.dumps({"_tag": "Chunk", "requestId": STREAM_ID, "values": [1]}),
        1,
        _defect,
    ),
    (
        "Request without an id",
        json.dumps({"_tag": "Request", "tag": "Hello", "payload": None, "headers": []}),
        1,
        _defect,
    ),
    ("Request with a float id", _request(1.5, "Hello"), 1, _defect),
    ("Request with an object id", _request({"a": 1}, "Hello"), 1, _defect),
    ("unknown RPC", _request("u-1", "LaunchMissiles", {"x": 1}), 1, _exit("u-1", "Die")),
    (
        "payload of the wrong type",
        _request(9, "StartTurn", ["not", "an", "object"]),
        1,
        _exit(9, "Fail", "BadRequest"),
    ),
    (
        "payload with a wrong field",
        _request(10, "ReadTurn", {"sessionId": "s", "turnId": "t", "offset": "zero"}),
        1,
        _exit(10, "Fail", "BadRequest"),
    ),
    (
        "missing payload",
        json.dumps({"_tag": "Request", "id": "p-1", "tag": "Hello", "headers": []}),
        1,
        _exit("p-1", "Die"),
    ),
    (
        "missing headers",
        json.dumps({"_tag": "Request", "id": "h-1", "tag": "Hello", "payload": None}),
        1,
        _exit("h-1", "Die"),
    ),
    (
        "headers not pairs",
        json.dumps({"_tag": "Request", "id": "h-2", "tag": "Hello", "payload": None, "headers": [[1, 2]]}),
        1,
        _exit("h-2", "Die"),
    ),
    ("id 0 as a number", _request(0, "Hello"), 1, _exit(0, None)),
    ("id 0 as a string", _request("0", "Hello"), 1, _exit("0", None)),
    (
        "Effect's optional Request fields",
        _request(11, "Hello", traceId="t", spanId="s", sampled=True),
        1,
        _exit(11, None),
    ),
    ("Interrupt for an unknown id", json.dumps({"_tag": "Interrupt", "requestId": "nobody"}), 0, _nothing),
    ("Interrupt without an id", json.dumps({"_tag": "Interrupt"}), 1, _defect),
    ("Ack for an unknown id", json.dumps({"_tag": "Ack", "requestId": 12345}), 0, _nothing),
    ("Ack with no chunk outstanding", json.dumps({"_tag": "Ack", "requestId": STREAM_ID}), 0, _nothing),
    (
        "Ack of the stream's id with the other JSON type",
        json.dumps({"_tag": "Ack", "requestId": 1}),
        0,
        _nothing,
    ),
    ("Eof", json.dumps({"_tag": "Eof"}), 0, _nothing),
    ("binary frame", _request("bin-1", "Hello").encode("utf-8"), 1, _exit("bin-1", None)),
    ("binary frame not UTF-8", b"\xff\xfe\x00garbage", 1, _defect),
    ("deeply nested JSON", "[" * 50_000 + "]" * 50_000, 1, _defect),
    (
        "lone surrogate in a prompt",
        _request(13, "StartTurn", {"sessionId": "s", "turnId": "t", "prompt": "\ud800"}),
        1,
        _exit(13, "Fail", "BadRequest"),
    ),
    # Found by the fuzz: an id the bridge cannot echo in a UTF-8 frame used to drop the connection.
    (
        "string id with a lone surrogate",
        '{"_tag":"Request","id":"\\ud800","tag":"Hello","payload":null,"headers":[]}',
        1,
        _defect,
    ),
    ("Ack id with a lone surrogate", '{"_tag":"Ack","requestId":"x\\udfff"}', 1, _defect),
    ("unknown RPC named with a lone surrogate", _request("u-2", "\udc00"), 1, _exit("u-2", "Die")),
    (
        "huge integer offset",
        _request(14, "ReadTurn", {"sessionId": "s", "turnId": "t", "offset": 10**30, "afterStep": 0}),
        1,
        _exit(14, "Fail", "BadRequest"),
    ),
]

BATCH = json.dumps(
    [
        {"_tag": "Ping"},
        {"_tag": "Nonsense"},
        {"_tag": "Request", "id": "b-1", "tag": "Hello", "payload": None, "headers": []},
    ]
)


class _Reader:
    """Reads one connection; acks the stream's Chunks at once and keeps every other message."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.parts: List[Dict[str, Any]] = []
        self.stream_exit: Optional[Dict[str, Any]] = None

    def next_other(self, until_exit: bool = False) -> Optional[Dict[str, Any]]:
        """The next message that is not the stream's; ``None`` once the stream's Exit came
        (only with ``until_exit``)."""
        while True:
            message = self.client.recv()
            if message.get("requestId") == STREAM_ID and message["_tag"] in ("Chunk", "Exit"):
                if message["_tag"] == "Chunk":
                    assert message["values"], "a Chunk is never empty"
                    self.parts.extend(message["values"])
                    self.client.send(frames.Ack(STREAM_ID))
                else:
                    self.stream_exit = message["exit"]
                    if until_exit:
                        return None
                continue
            return message

    def answers(self, count: int) -> List[Dict[str, Any]]:
        """The next ``count`` answers, then a Ping's Pong (so that nothing else came)."""
        got = [self.next_other() or {} for _ in range(count)]
        self.client.send(frames.Ping())
        assert self.next_other() == {"_tag": "Pong"}, f"an unexpected answer after {got}"
        return got

    def finish_stream(self) -> None:
        if self.stream_exit is None:
            other = self.next_other(until_exit=True)
            assert other is None, f"unexpected message while finishing the stream: {other}"


def _contiguous(parts: List[Dict[str, Any]]) -> None:
    assert [p["index"] for p in parts] == list(range(len(parts))), "no part lost, none repeated"
    assert parts[0]["type"] == "turn-start" and parts[-1]["type"] == "turn-finish"


def test_b08_bad_frames_while_streaming_leave_every_stream_whole(make_bridge, sid):
    # 2 steps of 150 chunks, 3 ms before each part: the turn runs ~1 s, through the whole burst.
    bridge = make_bridge(options={"steps": 2, "chunks": 150, "delay": 0.003})
    other_result: Dict[str, Any] = {}
    with bridge.connect() as main:
        main.open(sid)
        assert main.start(sid, "t-1", "x" * 300) == "started"

        def other_reader() -> None:
            with bridge.connect() as other:
                other_result["read"] = other.read(sid, "t-1")

        other = threading.Thread(target=other_reader, daemon=True)
        other.start()
        main.send(
            frames.Request(
                STREAM_ID, "ReadTurn", {"sessionId": sid, "turnId": "t-1", "offset": 0, "afterStep": 0}
            )
        )
        reader = _Reader(main)
        tried = 0
        for name, frame, count, check in BAD:
            main.send(frame)
            try:
                check(reader.answers(count))
            except AssertionError as exc:
                raise AssertionError(f"{name}: {exc}") from None
            tried += 1
        main.send(BATCH)
        got = reader.answers(3)
        assert got[0] == {"_tag": "Pong"} and got[1]["_tag"] == "Defect"
        _exit("b-1", None)([got[2]])
        # A third connection sends a frame over the size limit: closed with 1009, alone.
        victim = bridge.connect()
        victim.ws.send("x" * (16 * 1024 * 1024 + 1))
        opcode, data = victim.ws.recv_data(control_frame=True)
        assert opcode == websocket.ABNF.OPCODE_CLOSE and int.from_bytes(data[:2], "big") == 1009
        victim.ws.shutdown()
        reader.finish_stream()
        other.join(20)
        assert not other.is_alive()
    assert tried == len(BAD)
    assert reader.stream_exit == {"_tag": "Success", "value": None}
    _contiguous(reader.parts)
    parts, _, exit_ = other_result["read"]
    assert exit_ == {"_tag": "Success", "value": None}
    assert parts == reader.parts, "the other connection read the same turn, whole"
    assert bridge.proc.poll() is None, "the bridge is up"
    with bridge.connect() as again:
        assert again.value("Hello")["agentId"] == "echo"
    assert "Traceback" not in bridge.log(), "no bad input reached a bug path"


def test_b08_interrupt_of_a_live_stream_answers_interrupt_and_the_connection_goes_on(make_bridge, sid):
    bridge = make_bridge(options={"steps": 1, "chunks": 400, "delay": 0.005})
    with bridge.connect() as c:
        c.open(sid)
        c.start(sid, "t-1", "y" * 400)
        c.send(
            frames.Request(
                STREAM_ID, "ReadTurn", {"sessionId": sid, "turnId": "t-1", "offset": 0, "afterStep": 0}
            )
        )
        first = c.recv()
        assert first["_tag"] == "Chunk"
        c.send(frames.Interrupt(STREAM_ID))
        # The stream ends with Exit Failure[Interrupt] (Effect's fiberId is a number; ours null).
        while True:
            message = c.recv()
            if message["_tag"] == "Exit":
                break
            assert message["_tag"] == "Chunk" and message["requestId"] == STREAM_ID
        assert message["requestId"] == STREAM_ID
        (cause,) = message["exit"]["cause"]
        assert cause["_tag"] == "Interrupt"
        # The id is free again; the turn went on in the bridge (B04): a new read sees it whole.
        parts, _, exit_ = c.read(sid, "t-1")
        assert exit_["_tag"] == "Success"
        _contiguous(parts)

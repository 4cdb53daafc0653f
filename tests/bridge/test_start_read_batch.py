"""The bridge answers a StartTurn that started its turn and serves the ReadTurn of that turn
from its start, already received behind it, in one batch frame: StartTurn's Exit first, then
the stream's first Chunk (and its Exit when the turn is over). Anything else behind a
StartTurn is served after the answer, each in its own frame, as before.

StartTurn commits the new turn's start itself once the turn's thread runs (with what the
driver emitted by then): a driver that waits before its first part does not hold the answer.

A real bridge; the two requests go out in one socket write, so both are in before the
StartTurn's commit ends (the bridge looks only at what it has received).
"""
from __future__ import annotations

import json
import socket
from typing import Any, Dict, List, Tuple

import pytest
import websocket

from bridge_client.wire import frames
from bridge_harness import WireClient, text_of

pytestmark = pytest.mark.timeout(60)


def _send_together(client: WireClient, *messages: Any) -> None:
    """Send each message as its own text frame, all in one write on the socket."""
    data = b"".join(
        websocket.ABNF.create_frame(json.dumps(frames.to_json(m)), websocket.ABNF.OPCODE_TEXT).format()
        for m in messages
    )
    client.ws.sock.sendall(data)


def _start(rid: int, sid: str, tid: str, prompt: str) -> frames.Request:
    return frames.Request(rid, "StartTurn", {"sessionId": sid, "turnId": tid, "prompt": prompt}, ())


def _read(rid: int, sid: str, tid: str, offset: int = 0, after_step: int = 0) -> frames.Request:
    payload = {"sessionId": sid, "turnId": tid, "offset": offset, "afterStep": after_step}
    return frames.Request(rid, "ReadTurn", payload, ())


def _frame(client: WireClient) -> Any:
    """The next frame as JSON (an object, or a list for a batch)."""
    return json.loads(client.ws.recv())


def _read_rest(client: WireClient, rid: int, parts: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Ack and read frames (batches too) until the Exit of ``rid``; return its exit."""
    while True:
        got = _frame(client)
        for message in got if isinstance(got, list) else [got]:
            if message.get("requestId") != rid:
                continue
            if message["_tag"] == "Chunk":
                parts.extend(message["values"])
                client.send(frames.Ack(rid))
            else:
                return message["exit"]


def _batch_head(client: WireClient, start_id: int, read_id: int) -> Tuple[List[Any], List[Dict[str, Any]]]:
    """The first frame after the two requests: a batch of StartTurn's Exit and the stream's
    first Chunk (asserted); returns the batch and the Chunk's values."""
    got = _frame(client)
    assert isinstance(got, list), f"expected one batch frame, got {got!r}"
    assert got[0] == {
        "_tag": "Exit", "requestId": start_id, "exit": {"_tag": "Success", "value": got[0]["exit"]["value"]}
    }
    assert got[0]["exit"]["value"]["status"] == "started"
    assert got[1]["_tag"] == "Chunk" and got[1]["requestId"] == read_id
    assert got[1]["values"][0]["type"] == "turn-start", "B03: the turn-start was committed before the answer"
    return got, got[1]["values"]


def test_b03_start_turn_answer_and_first_chunk_go_in_one_batch_answer_first(make_bridge, sid, tid):
    bridge = make_bridge()
    with bridge.connect() as client:
        client.open(sid)
        _send_together(client, _start(10, sid, tid, "one two"), _read(11, sid, tid))
        got, parts = _batch_head(client, 10, 11)
        if got[-1]["_tag"] == "Exit":  # the whole turn was in the first commit
            assert got[-1] == {"_tag": "Exit", "requestId": 11, "exit": {"_tag": "Success", "value": None}}
            assert len(got) == 3
        else:
            client.send(frames.Ack(11))
            assert _read_rest(client, 11, parts) == {"_tag": "Success", "value": None}
        assert [p["index"] for p in parts] == list(range(len(parts)))
        assert parts[-1]["type"] == "turn-finish" and text_of(parts) == "one two"
        # The connection goes on as before: a plain read of the same turn.
        again, _, exit_ = client.read(sid, tid)
        assert again == parts and exit_["_tag"] == "Success"


def test_b03_one_chunk_in_flight_after_the_batch_until_the_ack(make_bridge, sid, tid):
    # A driver slower than the commit: the batch carries what was committed with the turn's
    # start; the next Chunk waits for the host's Ack however many parts are committed meanwhile.
    bridge = make_bridge(options={"delay": 0.05, "chunks": 4})
    with bridge.connect() as client:
        client.open(sid)
        _send_together(client, _start(1, sid, tid, "a b c d"), _read(2, sid, tid))
        got, parts = _batch_head(client, 1, 2)
        assert got[-1]["_tag"] == "Chunk", "a turn of 0.3 s is not over in its first commit"
        client.ws.settimeout(0.6)  # several parts are committed meanwhile
        with pytest.raises(websocket.WebSocketTimeoutException):
            client.ws.recv()
        client.ws.settimeout(10)
        client.send(frames.Ack(2))
        assert _read_rest(client, 2, parts) == {"_tag": "Success", "value": None}
        assert [p["index"] for p in parts] == list(range(len(parts)))
        assert text_of(parts) == "a b c d"


@pytest.mark.parametrize("how", ["frames", "batch"])
@pytest.mark.parametrize("which", ["other-turn", "offset", "after-step", "other-request"])
def test_b03_c09_what_is_not_the_new_turns_read_from_its_start_is_served_after_the_answer(
    make_bridge, sid, tid, which, how
):
    # Behind the StartTurn in the next frame, or beside it in one batch frame (as the host
    # sends the pair): either way the answer goes alone, and the rest is served after it.
    bridge = make_bridge()
    with bridge.connect() as client:
        client.open(sid)
        assert client.start(sid, "t-old", "old") == "started"
        client.read(sid, "t-old")
        behind = {
            "other-turn": _read(21, sid, "t-old"),
            "offset": _read(21, sid, tid, offset=1),
            "after-step": _read(21, sid, tid, after_step=1),
            "other-request": frames.Request(21, "Hello", None, ()),
        }[which]
        if how == "frames":
            _send_together(client, _start(20, sid, tid, "new turn"), behind)
        else:
            client.send([frames.to_json(_start(20, sid, tid, "new turn")), frames.to_json(behind)])
        first = _frame(client)
        assert isinstance(first, dict), f"StartTurn's answer goes alone: {first!r}"
        assert first["requestId"] == 20 and first["exit"]["value"]["status"] == "started"
        if which == "other-request":
            assert client.wait_exit(21)["_tag"] == "Success"
            return
        parts: List[Dict[str, Any]] = []
        assert _read_rest(client, 21, parts)["_tag"] == "Success"
        if which == "other-turn":
            assert text_of(parts) == "old" and parts[0]["turn"]["turnId"] == "t-old"
        elif which == "offset":
            assert parts[0]["index"] == 1 and text_of(parts) == "new turn"
        else:
            assert parts and all(p["step"] is None or p["step"] >= 1 for p in parts)


def test_b03_start_turn_of_a_running_turn_is_answered_alone(make_bridge, sid, tid):
    # Only a turn the StartTurn started is batched: "running" goes alone, then the read.
    bridge = make_bridge(options={"delay": 0.2})
    with bridge.connect() as client:
        client.open(sid)
        assert client.start(sid, tid, "x y") == "started"
        _send_together(client, _start(30, sid, tid, "x y"), _read(31, sid, tid))
        first = _frame(client)
        assert isinstance(first, dict) and first["requestId"] == 30
        assert first["exit"]["value"]["status"] == "running"
        parts: List[Dict[str, Any]] = []
        assert _read_rest(client, 31, parts)["_tag"] == "Success"
        assert text_of(parts) == "x y"


def test_b08_the_connection_serves_on_when_the_peer_goes_right_after_the_pair(make_bridge, sid, tid):
    bridge = make_bridge()
    with bridge.connect() as client:
        client.open(sid)
        _send_together(client, _start(50, sid, tid, "gone"), _read(51, sid, tid))
        client.ws.sock.shutdown(socket.SHUT_RDWR)
    with bridge.connect() as client:
        client.open(sid)
        parts, _, exit_ = client.read(sid, tid)
        assert exit_["_tag"] == "Success" and text_of(parts) == "gone"


def _hold_bridge(make_bridge, tmp_path, burst: bool) -> Tuple[Any, str]:
    release = str(tmp_path / "release")
    bridge = make_bridge(
        driver="first_commit_drivers:make_hold", agent_id="hold", options={"release": release, "burst": burst}
    )
    return bridge, release


def test_b03_a_driver_that_waits_before_emitting_does_not_hold_the_answer(make_bridge, tmp_path, sid, tid):
    # StartTurn commits the turn's start once the turn's thread runs; a driver that waits
    # before its first part (a model's first token) does not hold the answer: the batch
    # carries the turn-start alone, and the rest comes after the Ack, once committed.
    bridge, release = _hold_bridge(make_bridge, tmp_path, burst=False)
    with bridge.connect() as client:
        client.open(sid)
        _send_together(client, _start(60, sid, tid, "wait"), _read(61, sid, tid))
        got, parts = _batch_head(client, 60, 61)
        assert len(got) == 2 and [p["type"] for p in parts] == ["turn-start"]
        client.send(frames.Ack(61))
        open(release, "w").close()
        assert _read_rest(client, 61, parts) == {"_tag": "Success", "value": None}
        assert text_of(parts) == "after" and parts[-1]["type"] == "turn-finish"


def test_b03_what_a_driver_emits_before_it_waits_is_committed_and_read_in_order(
    make_bridge, tmp_path, sid, tid
):
    # The driver emits at once, then waits: whatever the first commit took (the turn-start,
    # and usually those parts with it), the answer comes only after it, and every part is
    # read once, in order.
    bridge, release = _hold_bridge(make_bridge, tmp_path, burst=True)
    with bridge.connect() as client:
        client.open(sid)
        _send_together(client, _start(70, sid, tid, "burst"), _read(71, sid, tid))
        got, parts = _batch_head(client, 70, 71)
        client.send(frames.Ack(71))
        deadline = 100
        while text_of(parts) != "before " and deadline:  # committed while the driver waits
            message = _frame(client)
            assert message["_tag"] == "Chunk" and message["requestId"] == 71, message
            parts.extend(message["values"])
            client.send(frames.Ack(71))
            deadline -= 1
        open(release, "w").close()
        assert _read_rest(client, 71, parts) == {"_tag": "Success", "value": None}
        assert [p["index"] for p in parts] == list(range(len(parts)))
        assert text_of(parts) == "before after"


def test_b03_a_read_turn_behind_the_start_in_its_own_batch_frame_is_answered_in_one_batch(
    make_bridge, sid, tid
):
    # A peer may send both in one batch frame: the same answer, StartTurn's Exit first.
    bridge = make_bridge()
    with bridge.connect() as client:
        client.open(sid)
        client.send([frames.to_json(_start(80, sid, tid, "x")), frames.to_json(_read(81, sid, tid))])
        got, parts = _batch_head(client, 80, 81)
        if got[-1]["_tag"] != "Exit":
            client.send(frames.Ack(81))
            assert _read_rest(client, 81, parts) == {"_tag": "Success", "value": None}
        assert text_of(parts) == "x"
        # Behind a request that is not the new turn's read, a batch is served in its order.
        hello = frames.Request(83, "Hello", None, ())
        client.send([frames.to_json(_start(82, sid, "t-2", "y")), frames.to_json(hello)])
        first = _frame(client)
        assert isinstance(first, dict) and first["requestId"] == 82
        assert client.wait_exit(83)["_tag"] == "Success"


def test_b08_many_start_turns_in_a_row_are_answered_in_order(make_bridge, sid):
    # Each started turn's answer looks at the next frame (a StartTurn, not its read): it is
    # served next by the loop, in order, however many queue up (no recursion).
    bridge = make_bridge()
    with bridge.connect() as client:
        client.open(sid)
        starts = [_start(1000 + i, sid, f"t-row-{i}", "r") for i in range(300)]
        for i in range(0, 300, 50):
            _send_together(client, *starts[i : i + 50])
        seen = []
        while len(seen) < 300:
            got = _frame(client)
            for message in got if isinstance(got, list) else [got]:
                seen.append(message["requestId"])
                assert message["exit"]["_tag"] == "Success", message
        assert seen == [1000 + i for i in range(300)]
        assert client.value("Hello")["bridgeId"]

"""Attacks on StartTurn and ReadTurn in one frame, against a
real bridge process: many pairs in one array, garbage between the two, a pair for a turn that
is over, the same pair sent again. Every stream gets every part of its turn once, in order,
and the connection serves on."""
from __future__ import annotations

import json
from typing import Any, Dict, List

import pytest

from bridge_harness import WireClient, text_of

pytestmark = pytest.mark.timeout(120)


def _start(rid: int, sid: str, tid: str, prompt: str) -> Dict[str, Any]:
    return {"_tag": "Request", "id": rid, "tag": "StartTurn", "payload": {"sessionId": sid, "turnId": tid,
                                                                          "prompt": prompt}, "headers": []}


def _read(rid: int, sid: str, tid: str) -> Dict[str, Any]:
    return {"_tag": "Request", "id": rid, "tag": "ReadTurn",
            "payload": {"sessionId": sid, "turnId": tid, "offset": 0, "afterStep": 0}, "headers": []}


def _collect(client: WireClient, streams: List[int], answers: List[int]) -> Dict[int, Any]:
    """Read frames (acking every Chunk) until every request in ``streams`` and ``answers`` has
    its Exit; returns ``{id: exit}`` and, for streams, ``{-id: values}``."""
    out: Dict[int, Any] = {}
    left = set(streams) | set(answers)
    while left:
        got = json.loads(client.ws.recv())
        for message in got if isinstance(got, list) else [got]:
            rid = message.get("requestId")
            if message["_tag"] == "Chunk":
                assert rid in streams, message
                out.setdefault(-rid, []).extend(message["values"])
                client.send({"_tag": "Ack", "requestId": rid})
            elif message["_tag"] == "Exit":
                assert rid in left, f"a second Exit for {rid}"
                out[rid] = message["exit"]
                left.discard(rid)
    return out


def test_b03_b08_a_thousand_pairs_in_one_frame_each_read_whole_once(make_bridge, sid):
    bridge = make_bridge(options={"steps": 1, "chunks": 3})
    with bridge.connect() as client:
        client.open(sid)
        n = 1000
        batch: List[Any] = []
        for i in range(n):
            batch += [_start(2 * i + 1, sid, f"t-many-{i}", f"p{i} q"), _read(2 * i + 2, sid, f"t-many-{i}")]
        client.ws.send(json.dumps(batch, separators=(",", ":")))
        got = _collect(client, [2 * i + 2 for i in range(n)], [2 * i + 1 for i in range(n)])
        started = read = 0
        for i in range(n):
            start_exit, read_exit = got[2 * i + 1], got[2 * i + 2]
            parts = got.get(-(2 * i + 2), [])
            if start_exit["_tag"] != "Success":  # Overloaded (max_running): nothing was written
                assert "Overloaded" in json.dumps(start_exit), start_exit
                assert read_exit["_tag"] == "Failure", read_exit  # no such turn
                continue
            started += 1
            if read_exit["_tag"] != "Success":
                # Overloaded: the connection's open streams were at their bound (a slow
                # machine leaves more reads open at once); refused before any part.
                assert "streams are open on this connection" in json.dumps(read_exit), read_exit
                assert not parts
                continue
            read += 1
            assert read_exit == {"_tag": "Success", "value": None}, read_exit
            assert [p["index"] for p in parts] == list(range(len(parts)))
            assert parts[0]["type"] == "turn-start" and parts[-1]["type"] == "turn-finish"
            assert text_of(parts) == f"p{i} q"
        assert started > 0 and read > 0
        assert client.value("Hello")["bridgeId"]


def test_b08_garbage_between_start_and_read_is_answered_and_the_pair_still_reads(make_bridge, sid, tid):
    bridge = make_bridge()
    with bridge.connect() as client:
        client.open(sid)
        no_such = {"_tag": "Request", "id": 99, "tag": "NoSuch", "payload": {}}
        garbage: List[Any] = [17, {"_tag": "Nope"}, no_such]
        client.ws.send(json.dumps([_start(1, sid, tid, "a b")] + garbage + [_read(2, sid, tid)]))
        got: Dict[int, Any] = {}
        defects = 0
        while 1 not in got or 2 not in got or 99 not in got:
            frame = json.loads(client.ws.recv())
            for message in frame if isinstance(frame, list) else [frame]:
                if message["_tag"] == "Defect":
                    defects += 1
                elif message["_tag"] == "Chunk":
                    got.setdefault(-2, []).extend(message["values"])
                    client.send({"_tag": "Ack", "requestId": 2})
                else:
                    got[message["requestId"]] = message["exit"]
        assert defects == 2
        assert got[1]["_tag"] == "Success" and got[2]["_tag"] == "Success" and got[99]["_tag"] != "Success"
        assert text_of(got[-2]) == "a b" and got[-2][-1]["type"] == "turn-finish"


def test_c09_a_pair_sent_again_and_a_pair_for_a_finished_turn_read_the_same_log(make_bridge, sid, tid):
    bridge = make_bridge()
    with bridge.connect() as client:
        client.open(sid)
        pair = [_start(1, sid, tid, "x y"), _read(2, sid, tid)]
        client.ws.send(json.dumps(pair))
        first = _collect(client, [2], [1])
        client.ws.send(json.dumps([_start(3, sid, tid, "x y"), _read(4, sid, tid)]))  # over by now
        again = _collect(client, [4], [3])
        assert first[1]["value"]["status"] == "started"
        assert again[3]["value"]["status"] == "finished"
        assert again[-4] == first[-2] and first[-2][-1]["type"] == "turn-finish"

"""Attacks on the batch answer to StartTurn with its ReadTurn behind it: the bridge
SIGKILLed around StartTurn's commit and its batch write. What the reader
got before the kill is in the log after the restart, at the same offsets (B03); the turn
goes on from there (B05). Real bridge processes, killed by their own driver."""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List

import pytest
import websocket

from bridge_harness import WireClient

from bridge_client.bridge.store import read_parts
from bridge_client.wire import frames

pytestmark = pytest.mark.timeout(90)


def _send_pair(client: WireClient, sid: str, tid: str) -> None:
    start = frames.Request(1, "StartTurn", {"sessionId": sid, "turnId": tid, "prompt": "p"}, ())
    payload = {"sessionId": sid, "turnId": tid, "offset": 0, "afterStep": 0}
    read = frames.Request(2, "ReadTurn", payload, ())
    client.ws.send(json.dumps([frames.to_json(start), frames.to_json(read)]))


def _read_until_gone(client: WireClient) -> List[Dict[str, Any]]:
    seen: List[Dict[str, Any]] = []
    try:
        while True:
            got = json.loads(client.ws.recv())
            for m in got if isinstance(got, list) else [got]:
                if m.get("_tag") == "Chunk" and m["requestId"] == 2:
                    seen.extend(m["values"])
                    client.send(frames.Ack(2))
                elif m.get("_tag") == "Exit" and m["requestId"] == 2:
                    return seen
    except (websocket.WebSocketException, OSError, ValueError):
        return seen


@pytest.mark.parametrize("delay", [0.0, 0.0005, 0.002, 0.005, 0.02])
def test_b03_b05_a_bridge_killed_around_the_batch_answer_kept_what_the_reader_saw(
    make_bridge, tmp_path, sid, tid, delay
):
    state = str(tmp_path / "state")
    options = {"marker": str(tmp_path / "marker"), "delay": delay, "deltas": 5}
    bridge = make_bridge(driver="self_kill_drivers:make_kill", agent_id="kill", options=options, state=state)
    with bridge.connect() as client:
        client.open(sid)
        _send_pair(client, sid, tid)
        seen = _read_until_gone(client)
    bridge.wait(10)
    assert [p["index"] for p in seen] == list(range(len(seen)))
    again = make_bridge(driver="self_kill_drivers:make_kill", agent_id="kill", options=options, state=state)
    with again.connect() as client:
        client.open(sid)
        status = client.start(sid, tid, "p")
        parts, _, exit_ = client.read(sid, tid)
    assert exit_["_tag"] == "Success", exit_
    stored = [json.loads(p.text) for p in read_parts(os.path.join(state, "bridge.sqlite3"), tid)]
    assert stored[: len(seen)] == seen, "B03: a part the reader saw is in the log after the kill"
    assert [p["index"] for p in stored] == list(range(len(stored)))
    assert [p["type"] for p in stored].count("turn-start") == 1 and stored[0]["type"] == "turn-start"
    # The read skips a discarded attempt's parts: two whole steps, then the turn's end.
    assert parts[-1]["type"] == "turn-finish" and parts[0] == stored[0]
    finished = [p["step"] for p in parts if p["type"] == "step-finish"]
    assert finished == [0, 1], (status, [(p["type"], p["step"], p["attempt"]) for p in parts])

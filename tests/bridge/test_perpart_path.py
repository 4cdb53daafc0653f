"""Issue 15's per-part path with real bridge processes: ``ctx.text`` through the run sink's
per-step text appender. A fast driver's parts reach a reader whole, in order, at their
offsets, equal to the store's, across connection drops and reads resumed from an offset and
across a ``reset_step`` (the attempt changes under the appender); a driver that misuses
``ctx.text`` gets the same typed errors as before and writes nothing by it."""
from __future__ import annotations

import json
import os
import random
import socket
import struct

import pytest

from bridge_harness import text_of
from perpart_drivers import LATE_FILE, delta, is_reasoning

from bridge_client.bridge.store import read_parts
from bridge_client.wire import frames

pytestmark = pytest.mark.timeout(120)


def _read_with_drops(bridge, rng, seen, drops):
    """ReadTurn "t" to its end, dropping the connection (a reset, no close frame) after a
    random number of Chunks ``drops`` times, each time reading on after the last part seen over
    a new connection. Returns the Exit of the last read."""
    while True:
        client = bridge.connect()
        try:
            offset = seen[-1]["index"] + 1 if seen else 0
            payload = {"sessionId": "s", "turnId": "t", "offset": offset, "afterStep": 0}
            rid = client.request("ReadTurn", payload)
            cut = rng.randint(1, 6) if drops > 0 else -1
            while True:
                message = json.loads(client.ws.recv())
                if message.get("requestId") != rid:
                    continue
                if message["_tag"] != "Chunk":
                    assert message["_tag"] == "Exit", message
                    return message["exit"]
                seen.extend(message["values"])
                cut -= 1
                if cut == 0:
                    # Gone at once (RST): the Chunk in flight and whatever follows are lost.
                    linger = struct.pack("ii", 1, 0)
                    client.ws.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
                    client.ws.sock.close()
                    drops -= 1
                    break
                client.send(frames.Ack(rid))
        finally:
            client.close()


@pytest.mark.parametrize("seed", [1, 2])
def test_b03_c09_a_fast_ctx_text_stream_reads_whole_in_order_across_drops_and_resumed_reads(
    make_bridge, tmp_path, seed
):
    count, steps = 20000, 3
    state = str(tmp_path / "state")
    bridge = make_bridge("perpart_drivers:make_fast", options={"count": count, "steps": steps}, state=state)
    rng = random.Random(seed)
    seen = []
    with bridge.connect() as client:
        client.open("s")
        client.start("s", "t", "go")
    exit_ = _read_with_drops(bridge, rng, seen, drops=4)
    assert exit_["_tag"] == "Success", exit_
    # Every part once, in order, equal to the store's (B03: what a reader saw was committed);
    # the read skips only parts of the attempt a step-reset discarded before it got there.
    indexes = [p["index"] for p in seen]
    assert indexes == sorted(set(indexes))
    stored = [json.loads(p.text) for p in read_parts(os.path.join(state, "bridge.sqlite3"), "t")]
    assert [p["index"] for p in stored] == list(range(len(stored)))
    for p in seen:
        assert stored[p["index"]] == p
    skipped = [stored[i] for i in sorted(set(range(len(stored))) - set(indexes))]
    assert all((p["step"], p["attempt"]) == (1, 1) and p["type"] != "step-reset" for p in skipped)
    seen = stored  # the whole log, for the checks below
    # Step 1's first attempt was reset half way: its deltas carry attempt 1, then attempt 2's.
    resets = [p for p in seen if p["type"] == "step-reset"]
    assert [(p["step"], p["discardedAttempt"]) for p in resets] == [(1, 1)]
    deltas = [p for p in seen if p["type"] in ("text-delta", "reasoning-delta")]
    assert {(p["step"], p["attempt"]) for p in deltas} == {(0, 1), (1, 1), (1, 2), (2, 1)}
    assert len(deltas) == count * steps + count // 2
    kept = [p for p in deltas if (p["step"], p["attempt"]) != (1, 1)]
    assert [(p["type"], p["text"]) for p in kept] == [
        ("reasoning-delta" if is_reasoning(i) else "text-delta", delta(s, i))
        for s in range(steps)
        for i in range(count)
    ]
    # A fresh read skips the discarded attempt and gives the same text.
    with bridge.connect() as client:
        parts, chunks, exit_ = client.read("s", "t")
    assert exit_["_tag"] == "Success" and chunks > 1
    assert text_of(parts) == "".join(p["text"] for p in kept if p["type"] == "text-delta")


def test_b08_ctx_text_misuse_gets_typed_errors_and_writes_nothing(make_bridge, tmp_path):
    state = str(tmp_path / "state")
    bridge = make_bridge("perpart_drivers:make_misuse", state=state)
    with bridge.connect() as client:
        client.open("s")
        client.start("s", "t", "go")
        parts, _, exit_ = client.read("s", "t")
    assert exit_["_tag"] == "Success", exit_
    errors = [p["data"] for p in parts if p["type"] == "data" and p["name"] == "errors"]
    assert errors == [[
        "RuntimeError",  # no step open yet
        "TypeError", "TypeError", "TypeError",  # 7, b"bytes", None
        "ValueError",  # a lone surrogate
        "TypeError", "ValueError",  # reasoning(7), reasoning of a lone surrogate
        "RuntimeError", "RuntimeError",  # text, reasoning after finish_step
        "RuntimeError",  # after reset_step
    ]]
    # The left-behind thread's texts stop when the runner closes the context; then it raises.
    late_file = os.path.join(str(tmp_path / "workspace"), LATE_FILE)
    for _ in range(500):
        if os.path.exists(late_file) and open(late_file).read():
            break
        threading_wait(0.01)
    assert open(late_file).read() == "RuntimeError"
    # In the store: every text the driver emitted while it could, nothing refused, nothing after
    # the runner's end of the open step and of the turn.
    stored = [json.loads(p.text) for p in read_parts(os.path.join(state, "bridge.sqlite3"), "t")]
    assert [p["index"] for p in stored] == list(range(len(stored)))
    texts = [p["text"] for p in stored if p["type"] == "text-delta"]
    late = texts[4:]
    assert texts[:4] == ["a", "b", "dropped", "c"] and late and set(late) == {"late"}
    assert [p["type"] for p in stored[-2:]] == ["step-finish", "turn-finish"]
    # The read is the store, but for the reset attempt's parts (once the reset is committed).
    read = {p["index"]: p for p in parts}
    assert all(stored[i] == p for i, p in read.items())
    unread = [p for p in stored if p["index"] not in read]
    assert all((p["step"], p["attempt"]) == (1, 1) and p["type"] != "step-reset" for p in unread)


def threading_wait(seconds: float) -> None:
    import threading

    threading.Event().wait(seconds)

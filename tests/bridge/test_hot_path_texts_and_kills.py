"""Breaking the hot path with real bridge processes: odd text through the cached
JSON head/tail of ``ctx.text`` (the wire JSON stays valid and decodes to the same text), the
bridge killed at random moments of a fast and of a paced stream (every part a reader saw is
in the store at its offset after the restart: B03), and a reader that acks nothing (the
bridge's other connections go on)."""
from __future__ import annotations

import json
import os
import random
import socket
import time

import pytest

from bridge_harness import text_of
from hot_path_drivers import ODD

from bridge_client.wire import frames

pytestmark = pytest.mark.timeout(120)


def _raw_read(client, session, turn, offset=0, after_step=0):
    """ReadTurn to its end with the raw frames: (parts decoded from each raw frame, exit)."""
    rid = client.request(
        "ReadTurn", {"sessionId": session, "turnId": turn, "offset": offset, "afterStep": after_step}
    )
    parts = []
    while True:
        raw = client.ws.recv()
        message = json.loads(raw)  # strict: the frame must be valid JSON
        if message.get("requestId") != rid:
            continue
        if message["_tag"] == "Chunk":
            parts.extend(message["values"])
            client.send(frames.Ack(rid))
        else:
            return parts, message["exit"]


def test_b03_odd_text_through_ctx_text_reaches_the_reader_and_the_store_unchanged(make_bridge):
    bridge = make_bridge("hot_path_drivers:make_odd")
    with bridge.connect() as client:
        client.open("s")
        client.start("s", "t", "go")
        parts, exit_ = _raw_read(client, "s", "t")
    assert exit_["_tag"] == "Success", exit_
    deltas = [p["text"] for p in parts if p["type"] == "text-delta"]
    assert deltas == (ODD + ["after"]) * 2
    assert [p["data"] for p in parts if p["type"] == "data"] == [3, 3]
    assert [p["index"] for p in parts] == list(range(len(parts)))
    # And read again from the store by a fresh connection, from an offset inside the step.
    with bridge.connect() as client:
        again, exit_ = _raw_read(client, "s", "t", offset=5)
    assert again == parts[5:]


def _read_until_gone(client, session, turn, seen):
    """ReadTurn from 0, acking each Chunk, appending every value to ``seen`` until the
    connection drops (the bridge killed) or the stream ends."""
    try:
        rid = client.request("ReadTurn", {"sessionId": session, "turnId": turn, "offset": 0, "afterStep": 0})
        while True:
            message = json.loads(client.ws.recv())
            if message.get("requestId") != rid:
                continue
            if message["_tag"] != "Chunk":
                return
            seen.extend(message["values"])
            client.send(frames.Ack(rid))
    except Exception:  # the bridge was killed under the read
        return


@pytest.mark.parametrize(
    "delay,count,window",
    [(0.0, 400, 0.4), (0.002, 120, 1.0), (0.06, 8, 1.5)],
    ids=["fast", "paced", "slow-inline-commit"],
)
def test_b03_b05_sigkill_at_random_moments_loses_nothing_a_reader_saw(
    make_bridge, tmp_path, delay, count, window
):
    import threading

    from bridge_client.bridge.store import read_parts

    rng = random.Random(1500 + int(delay * 1000))
    options = {"count": count, "delay": delay, "steps": 3}
    for run in range(5):
        state = str(tmp_path / f"kill-{run}")
        bridge = make_bridge("hot_path_drivers:make_counter", options=options, state=state)
        seen = []
        with bridge.connect() as client:
            client.open("s")
            client.start("s", "t", "go")
            with bridge.connect() as reader_client:
                reader = threading.Thread(target=_read_until_gone, args=(reader_client, "s", "t", seen))
                reader.start()
                time.sleep(rng.uniform(0.0, window))
                bridge.kill()
                reader.join(10)
            assert not reader.is_alive()
        stored = read_parts(os.path.join(state, "bridge.sqlite3"), "t")
        by_index = {p.index: json.loads(p.text) for p in stored}
        assert [p.index for p in stored] == list(range(len(stored))), f"run {run}: a gap in the store"
        assert len(stored) >= len(seen), f"run {run}: a reader saw {len(seen)} parts, stored {len(stored)}"
        assert [p["index"] for p in seen] == list(range(len(seen))), f"run {run}: a gap or a repeat"
        for value in seen:
            assert by_index[value["index"]] == value, f"run {run}: part {value['index']} differs"
        # Restart on the same state: the turn is continued (B05) and reads whole, offsets kept.
        again = make_bridge("hot_path_drivers:make_counter", options=options, state=state)
        with again.connect() as client:
            client.open("s")
            client.start("s", "t", "go")
            parts, _, exit_ = client.read("s", "t")
        assert exit_["_tag"] == "Success", exit_
        # The store after the restart still holds every part read before, unchanged, no gap.
        stored = read_parts(os.path.join(state, "bridge.sqlite3"), "t")
        assert [p.index for p in stored] == list(range(len(stored)))
        for value in seen:
            assert json.loads(stored[value["index"]].text) == value, f"run {run}: {value['index']} rewritten"
        # The read skips the discarded attempt (a step-reset says which) and gives the whole text.
        indexes = [p["index"] for p in parts]
        assert indexes == sorted(set(indexes))
        for value in parts:
            assert json.loads(stored[value["index"]].text) == value
        expected = "".join(f"<{s}:{i}>" for s in range(3) for i in range(options["count"]))
        assert text_of(parts) == expected, f"run {run}: the text after the restart is not whole"
        finished = [p for p in parts if p["type"] == "step-finish"]
        assert len(finished) == 3
        again.stop()


def test_b04_a_stream_whose_chunk_is_never_acked_does_not_hold_up_its_connection(make_bridge):
    # Two ReadTurns on one connection: the first is never acked; the second, and a plain RPC,
    # go on to their ends on that same connection, and another connection is served too.
    bridge = make_bridge("hot_path_drivers:make_counter", options={"count": 2000, "delay": 0, "steps": 2})
    with bridge.connect() as client:
        client.open("s")
        client.start("s", "a", "go")
        client.start("s", "b", "go")
        stalled = client.request("ReadTurn", {"sessionId": "s", "turnId": "a", "offset": 0, "afterStep": 0})
        reading = client.request("ReadTurn", {"sessionId": "s", "turnId": "b", "offset": 0, "afterStep": 0})
        hello = client.request("Hello", None)
        stalled_chunks, parts, exits = 0, [], {}
        deadline = time.monotonic() + 60
        while reading not in exits or hello not in exits:
            assert time.monotonic() < deadline, "the connection stalled behind an un-acked stream"
            message = client.recv()
            rid = message.get("requestId")
            if message["_tag"] == "Chunk" and rid == stalled:
                stalled_chunks += 1  # never acked
            elif message["_tag"] == "Chunk" and rid == reading:
                parts.extend(message["values"])
                client.send(frames.Ack(reading))
            elif message["_tag"] == "Exit":
                exits[rid] = message["exit"]
        assert stalled_chunks == 1, "the bridge sent past a Chunk that was not acked"
        assert exits[reading]["_tag"] == "Success"
        assert text_of(parts) == "".join(f"<{s}:{i}>" for s in range(2) for i in range(2000))
        with bridge.connect() as other:
            assert other.value("Hello")["bridgeId"]


def test_b04_a_host_that_stops_reading_its_socket_does_not_stall_other_connections(make_bridge):
    # The connection's own thread now sends a stream's first Chunk: a peer whose socket is full
    # may hold that thread, but never the accept loop nor another connection's reads.
    bridge = make_bridge(
        "hot_path_drivers:make_counter",
        options={"count": 20000, "delay": 0, "steps": 1},
        args=["--send-timeout", "30"],
    )
    with bridge.connect() as setup:
        setup.open("s")
        for name in ("a", "b", "c"):
            setup.start("s", name, "go")
    with bridge.connect() as deaf:
        deaf.ws.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        for name in ("a", "b", "c"):  # never read: the bridge's sends fill the socket
            deaf.request("ReadTurn", {"sessionId": "s", "turnId": name, "offset": 0, "afterStep": 0})
        time.sleep(0.5)
        for _ in range(3):
            started = time.monotonic()
            with bridge.connect() as other:
                parts, _, exit_ = other.read("s", "c")
            assert exit_["_tag"] == "Success"
            assert len(parts) == 20000 + 4
            assert time.monotonic() - started < 20



@pytest.mark.parametrize("delay,count", [(0.0005, 500), (0.06, 60)], ids=["group-commit", "inline-commit"])
def test_b04_a_deaf_reader_of_a_running_turn_does_not_stall_the_commits_of_others(make_bridge, delay, count):
    # A committing thread (the store's writer, or a paced driver's own thread) sends to a
    # turn's streams only what goes into the socket at once: a reader that stopped reading its
    # socket must not hold that thread (and so every turn's commits) for the send timeout.
    bridge = make_bridge(
        "hot_path_drivers:make_counter",
        options={"count": count, "delay": delay, "steps": 1, "size": 20_000},
        args=["--send-timeout", "60"],
    )
    with bridge.connect() as setup:
        setup.open("s")
        with bridge.connect() as deaf:
            deaf.ws.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            setup.start("s", "a", "go")
            deaf.request("ReadTurn", {"sessionId": "s", "turnId": "a", "offset": 0, "afterStep": 0})
            time.sleep(0.3)  # the deaf socket fills
            started = time.monotonic()
            setup.start("s", "b", "go")
            parts, _, exit_ = setup.read("s", "b")
            took = time.monotonic() - started
            assert exit_["_tag"] == "Success"
            assert len(parts) == count + 4
            assert took < 30, f"turn b took {took:.1f} s behind a deaf reader of turn a"

"""Sessions and turns over the wire: OpenSession, StartTurn, ReadTurn (acks, offsets,
afterStep, several readers), CancelTurn, CloseSession; B03 and B04."""
from __future__ import annotations

import json
import os
import sqlite3
import time

import pytest
import websocket

from bridge_client.bridge.store import read_parts
from bridge_client.bridge.turns import MAX_CHUNK_VALUES
from bridge_client.wire import frames
from bridge_client.wire.parts import part_from_dict
from bridge_harness import text_of, wait_until

pytestmark = pytest.mark.timeout(60)


def _check_log(parts):
    """Every part decodes; indexes run 0..n-1; turn-start first, turn-finish last."""
    for p in parts:
        part_from_dict(p)
    assert [p["index"] for p in parts] == list(range(len(parts)))
    assert parts[0]["type"] == "turn-start"
    assert parts[-1]["type"] == "turn-finish"


def _store_rows(bridge, sql, params=()):
    conn = sqlite3.connect(f"file:{os.path.join(bridge.state, 'bridge.sqlite3')}?mode=ro", uri=True)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


# ---------------------------------------------------------------------------- sessions


def test_open_session_new_gets_revision_0_and_the_drivers_initial_data(shared_echo, sid):
    with shared_echo.connect() as c:
        assert c.open(sid) == {"sessionId": sid, "revision": 0, "data": {"turns": 0}}


def test_open_session_keeps_the_higher_revision(shared_echo, sid):
    with shared_echo.connect() as c:
        c.open(sid)
        higher = {"sessionId": sid, "revision": 5, "data": {"turns": 42}}
        assert c.open(sid, higher) == higher
        lower = {"sessionId": sid, "revision": 3, "data": {"turns": 1}}
        assert c.open(sid, lower) == higher  # the bridge's copy wins
        assert c.open(sid) == higher


def test_open_session_new_with_the_hosts_state_adopts_it(shared_echo, sid):
    with shared_echo.connect() as c:
        state = {"sessionId": sid, "revision": 7, "data": {"turns": 3, "x": [1, 2]}}
        assert c.open(sid, state) == state


def test_close_session_then_start_turn_is_session_not_found_and_open_reopens(shared_echo, sid, tid):
    with shared_echo.connect() as c:
        c.open(sid)
        assert c.value("CloseSession", {"sessionId": sid}) == {
            "sessionId": sid,
            "revision": 0,
            "data": {"turns": 0},
        }
        (cause,) = c.causes("StartTurn", {"sessionId": sid, "turnId": tid, "prompt": "x"})
        assert cause["error"]["_tag"] == "SessionNotFound"
        c.open(sid)
        assert c.start(sid, tid, "x") == "started"


def test_close_session_leaves_its_turns_running(make_bridge, sid, tid):
    bridge = make_bridge(options={"delay": 0.05})
    with bridge.connect() as c:
        c.open(sid)
        c.start(sid, tid, "a b c d")
        c.value("CloseSession", {"sessionId": sid})
        parts, _, exit_ = c.read(sid, tid)  # reading a closed session's turn is allowed
    assert exit_["_tag"] == "Success"
    assert parts[-1]["finishReason"] == "stop"


def test_session_state_revision_grows_with_each_turn(shared_echo, sid):
    with shared_echo.connect() as c:
        c.open(sid)
        for n in (1, 2):
            c.start(sid, f"{sid}-t{n}", "hi")
            parts, _, _ = c.read(sid, f"{sid}-t{n}")
            (state_part,) = [p for p in parts if p["type"] == "session-state"]
            assert state_part["state"] == {"sessionId": sid, "revision": n, "data": {"turns": n}}
        assert c.open(sid)["revision"] == 2


# ---------------------------------------------------------------------------- StartTurn


def test_start_turn_statuses_started_running_finished(make_bridge, sid, tid):
    bridge = make_bridge(options={"delay": 0.1})
    with bridge.connect() as c:
        c.open(sid)
        assert c.start(sid, tid, "one two") == "started"
        assert c.start(sid, tid, "one two") == "running"
        parts, _, _ = c.read(sid, tid)
        _check_log(parts)
        assert c.start(sid, tid, "one two") == "finished"


def test_start_turn_twice_is_harmless(shared_echo, sid, tid):
    with shared_echo.connect() as c:
        c.open(sid)
        c.start(sid, tid, "same prompt")
        c.start(sid, tid, "same prompt")
        parts, _, _ = c.read(sid, tid)
    _check_log(parts)
    assert sum(p["type"] == "turn-start" for p in parts) == 1
    assert len(_store_rows(shared_echo, "SELECT id FROM turns WHERE id = ?", (tid,))) == 1


def test_start_turn_same_id_other_prompt_is_turn_conflict(shared_echo, sid, tid):
    with shared_echo.connect() as c:
        c.open(sid)
        c.start(sid, tid, "first")
        (cause,) = c.causes("StartTurn", {"sessionId": sid, "turnId": tid, "prompt": "second"})
        assert cause["_tag"] == "Fail" and cause["error"]["_tag"] == "TurnConflict"


def test_start_turn_same_id_in_another_session_is_turn_conflict(shared_echo, sid, tid):
    with shared_echo.connect() as c:
        c.open(sid)
        c.open(sid + "-other")
        c.start(sid, tid, "p")
        (cause,) = c.causes("StartTurn", {"sessionId": sid + "-other", "turnId": tid, "prompt": "p"})
        assert cause["error"]["_tag"] == "TurnConflict"
        (cause,) = c.causes(
            "ReadTurn", {"sessionId": sid + "-other", "turnId": tid, "offset": 0, "afterStep": 0}
        )
        assert cause["error"]["_tag"] == "TurnNotFound"


def test_turn_start_carries_the_turn_state(shared_echo, sid, tid):
    with shared_echo.connect() as c:
        c.open(sid)
        c.start(sid, tid, "hello there")
        parts, _, _ = c.read(sid, tid)
    turn = parts[0]["turn"]
    assert parts[0]["index"] == 0 and parts[0]["step"] is None and parts[0]["attempt"] == 1
    assert (
        turn["protocol"] == 1 and turn["agentId"] == "echo" and turn["bridgeId"] == shared_echo.info.bridge_id
    )
    assert (turn["sessionId"], turn["turnId"], turn["prompt"]) == (sid, tid, "hello there")
    assert turn["startedAt"].endswith("Z")


# ---------------------------------------------------------------------------- ReadTurn


def test_read_turn_with_acks_across_many_chunks(make_bridge, sid, tid):
    bridge = make_bridge(options={"steps": 2, "chunks": 3000})
    prompt = "".join(chr(ord("a") + i % 26) for i in range(6000))
    with bridge.connect() as c:
        c.open(sid)
        c.start(sid, tid, prompt)
        rid = c.request("ReadTurn", {"sessionId": sid, "turnId": tid, "offset": 0, "afterStep": 0})
        sizes, parts = [], []
        while True:
            message = c.recv()
            if message["_tag"] == "Exit":
                assert message["exit"] == {"_tag": "Success", "value": None}
                break
            assert message["_tag"] == "Chunk" and message["requestId"] == rid
            sizes.append(len(message["values"]))
            parts.extend(message["values"])
            if parts[-1]["type"] == "turn-finish":
                continue  # the Exit follows right after the Chunk that holds turn-finish
            # One Chunk, then nothing until the Ack.
            c.ws.settimeout(0.2)
            with pytest.raises(websocket.WebSocketTimeoutException):
                c.ws.recv()
            c.ws.settimeout(5)
            c.send(frames.Ack(rid))
    _check_log(parts)
    # 6,000+ parts; while each Ack waits the parts pile up and go in larger Chunks, bounded
    # by MAX_CHUNK_VALUES and about MAX_CHUNK_BYTES of JSON each; one Chunk in flight always.
    assert len(sizes) > len(parts) // MAX_CHUNK_VALUES and 256 < max(sizes) <= MAX_CHUNK_VALUES
    for step in (0, 1):
        assert text_of([p for p in parts if p["step"] == step]) == prompt


def test_read_turn_chunks_are_bounded_in_bytes(make_bridge, sid, tid):
    bridge = make_bridge(options={"chunks": 8})
    prompt = "x" * (8 * 100_000)  # eight deltas of 100 kB each
    with bridge.connect() as c:
        c.open(sid)
        c.start(sid, tid, prompt)
        parts, chunks, _ = c.read(sid, tid)
    _check_log(parts)
    assert text_of(parts) == prompt
    assert chunks >= 4  # at most about 256 KiB per Chunk


def test_read_turn_from_an_offset(shared_echo, sid, tid):
    with shared_echo.connect() as c:
        c.open(sid)
        c.start(sid, tid, "a b c")
        full, _, _ = c.read(sid, tid)
        tail, _, exit_ = c.read(sid, tid, offset=5)
        assert tail == full[5:]
        past, chunks, exit_ = c.read(sid, tid, offset=len(full) + 10)
        assert past == [] and chunks == 0 and exit_["_tag"] == "Success"


def test_read_turn_after_step_skips_earlier_steps(make_bridge, sid, tid):
    bridge = make_bridge(options={"steps": 3})
    with bridge.connect() as c:
        c.open(sid)
        c.start(sid, tid, "a b")
        parts, _, _ = c.read(sid, tid, after_step=2)
    assert parts[0]["type"] == "turn-start" and parts[-1]["type"] == "turn-finish"
    steps = {p["step"] for p in parts}
    assert steps == {None, 2}
    assert [p["type"] for p in parts if p["step"] == 2][0] == "step-start"


def test_read_turn_while_it_runs_waits_for_new_parts(make_bridge, sid, tid):
    bridge = make_bridge(options={"steps": 2, "delay": 0.05})
    with bridge.connect() as c:
        c.open(sid)
        c.start(sid, tid, "w1 w2 w3")
        t0 = time.monotonic()
        parts, chunks, _ = c.read(sid, tid)
        assert time.monotonic() - t0 > 0.3
    _check_log(parts)
    assert chunks > 1  # parts arrived while the turn ran


def test_b04_two_readers_at_once_each_from_its_own_offset(make_bridge, sid, tid):
    bridge = make_bridge(options={"steps": 2, "delay": 0.03})
    with bridge.connect() as a, bridge.connect() as b:
        a.open(sid)
        a.start(sid, tid, "one two three")
        ra = a.request("ReadTurn", {"sessionId": sid, "turnId": tid, "offset": 0, "afterStep": 0})
        rb = b.request("ReadTurn", {"sessionId": sid, "turnId": tid, "offset": 3, "afterStep": 0})
        got = {ra: [], rb: []}
        done = set()
        # Interleave the two readers on one thread: each acks what it got.
        while len(done) < 2:
            for client, rid in ((a, ra), (b, rb)):
                if rid in done:
                    continue
                message = client.recv()
                if message["_tag"] == "Exit":
                    done.add(rid)
                else:
                    got[rid].extend(message["values"])
                    client.send(frames.Ack(rid))
    _check_log(got[ra])
    assert got[rb] == got[ra][3:]


def test_b04_a_turn_runs_with_no_reader_and_is_read_after_it_finished(make_bridge, sid, tid):
    bridge = make_bridge(options={"steps": 3, "delay": 0.01})
    with bridge.connect() as c:
        c.open(sid)
        c.start(sid, tid, "nobody reads this yet")
    # No connection at all while it runs.
    assert wait_until(
        lambda: _store_rows(bridge, "SELECT status FROM turns WHERE id = ?", (tid,)) == [("finished",)], 10
    )
    with bridge.connect() as c:
        assert c.start(sid, tid, "nobody reads this yet") == "finished"
        parts, _, _ = c.read(sid, tid)
    _check_log(parts)
    assert parts[-1]["finishReason"] == "stop"
    assert text_of(parts) == "nobody reads this yet" * 3


def test_b04_a_reader_that_drops_leaves_the_turn_running(make_bridge, sid, tid):
    bridge = make_bridge(options={"steps": 2, "delay": 0.05})
    with bridge.connect() as c:
        c.open(sid)
        c.start(sid, tid, "a b c")
        c.request("ReadTurn", {"sessionId": sid, "turnId": tid, "offset": 0, "afterStep": 0})
        first = c.recv()
        assert first["_tag"] == "Chunk"
    # Dropped mid-read; read the rest after the last part we had.
    with bridge.connect() as c:
        rest, _, _ = c.read(sid, tid, offset=len(first["values"]))
    _check_log(first["values"] + rest)


def test_interrupt_stops_the_read_and_the_turn_goes_on(make_bridge, sid, tid):
    bridge = make_bridge(options={"steps": 2, "delay": 0.05})
    with bridge.connect() as c:
        c.open(sid)
        c.start(sid, tid, "a b c")
        rid = c.request("ReadTurn", {"sessionId": sid, "turnId": tid, "offset": 0, "afterStep": 0})
        assert c.recv()["_tag"] == "Chunk"
        c.send(frames.Interrupt(rid))
        while True:
            message = c.recv()
            if message["_tag"] == "Exit":
                break
        assert message["exit"] == {"_tag": "Failure", "cause": [{"_tag": "Interrupt", "fiberId": None}]}
        parts, _, _ = c.read(sid, tid)
    _check_log(parts)
    assert parts[-1]["finishReason"] == "stop"


# ---------------------------------------------------------------------------- CancelTurn, errors


def test_cancel_turn_ends_it_cancelled(make_bridge, sid, tid):
    bridge = make_bridge(options={"steps": 100, "delay": 0.05})  # 5 s when not cancelled
    with bridge.connect() as c:
        c.open(sid)
        c.start(sid, tid, "a b c d e")
        time.sleep(0.2)
        result = c.value("CancelTurn", {"sessionId": sid, "turnId": tid})
        assert result["turnId"] == tid and result["status"] in ("running", "finished")
        t0 = time.monotonic()
        parts, _, _ = c.read(sid, tid)
        assert time.monotonic() - t0 < 3
        assert c.start(sid, tid, "a b c d e") == "finished"
        assert c.value("CancelTurn", {"sessionId": sid, "turnId": tid})["status"] == "finished"
    _check_log(parts)
    assert parts[-1]["finishReason"] == "cancelled"
    # Every step that started is closed.
    assert sum(p["type"] == "step-start" for p in parts) == sum(p["type"] == "step-finish" for p in parts)


def test_driver_error_ends_the_turn_with_error_and_closes_the_step(make_bridge, sid, tid):
    bridge = make_bridge(options={"steps": 3, "fail_at": 1})
    with bridge.connect() as c:
        c.open(sid)
        c.start(sid, tid, "x")
        parts, _, _ = c.read(sid, tid)
        assert c.value("Hello")["agentId"] == "echo"  # the bridge lives on
    _check_log(parts)
    finish = parts[-1]
    assert finish["finishReason"] == "error"
    assert finish["error"].startswith("RuntimeError: echo fails at step 1")
    assert (
        parts[-2]["type"] == "step-finish" and parts[-2]["step"] == 1 and parts[-2]["finishReason"] == "error"
    )


# ---------------------------------------------------------------------------- B03


def test_b03_every_part_is_in_the_store_with_offset_step_and_attempt(make_bridge, sid, tid):
    bridge = make_bridge(options={"steps": 2})
    with bridge.connect() as c:
        c.open(sid)
        c.start(sid, tid, "stored parts")
        parts, _, _ = c.read(sid, tid)
    rows = read_parts(os.path.join(bridge.state, "bridge.sqlite3"), tid)
    assert [json.loads(r[4]) for r in rows] == parts
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
        (p["index"], p["step"], p["attempt"], p["type"]) for p in parts
    ]
    (session,) = _store_rows(bridge, "SELECT revision, data FROM sessions WHERE id = ?", (sid,))
    assert session == (1, json.dumps({"turns": 1}, separators=(",", ":")))
    (turn,) = _store_rows(bridge, "SELECT status, finish FROM turns WHERE id = ?", (tid,))
    assert turn[0] == "finished" and json.loads(turn[1])["finishReason"] == "stop"


def test_b03_parts_are_committed_before_a_reader_sees_them(make_bridge, sid, tid):
    bridge = make_bridge(options={"steps": 20, "delay": 0.01})
    with bridge.connect() as c:
        c.open(sid)
        c.start(sid, tid, "a b c")
        rid = c.request("ReadTurn", {"sessionId": sid, "turnId": tid, "offset": 0, "afterStep": 0})
        while True:
            message = c.recv()
            if message["_tag"] == "Exit":
                break
            # Whatever we were sent is already in the database, from another connection.
            last = message["values"][-1]["index"]
            count = len(read_parts(os.path.join(bridge.state, "bridge.sqlite3"), tid))
            assert count > last
            c.send(frames.Ack(rid))

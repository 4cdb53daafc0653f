"""B05: a turn a dead bridge left unfinished is continued by the next bridge on its next
StartTurn: completed steps kept, the cut step reset and run again with attempt + 1."""
from __future__ import annotations

import json
import os

import pytest

from bridge_client.bridge.store import read_parts, summary
from bridge_client.wire import frames
from bridge_harness import BridgeProcess, text_of

pytestmark = pytest.mark.timeout(60)


def _read_until(c, sid, tid, predicate):
    """Read a turn, acking, until ``predicate(parts)``; return the parts read."""
    rid = c.request("ReadTurn", {"sessionId": sid, "turnId": tid, "offset": 0, "afterStep": 0})
    parts = []
    while not predicate(parts):
        message = c.recv()
        assert message["_tag"] == "Chunk", message
        parts.extend(message["values"])
        c.send(frames.Ack(rid))
    return parts


def _in_step(step):
    return lambda parts: any(p["type"] == "tool-call" and p["step"] == step for p in parts)


def _logged(bridge, tid):
    """Every part of the turn, from the store."""
    return [json.loads(p.text) for p in read_parts(os.path.join(bridge.state, "bridge.sqlite3"), tid)]


def _restart(bridge):
    bridge.kill()  # SIGKILL: no clean shutdown at all
    return BridgeProcess(bridge.state, bridge.workspace, bridge.driver).start()


def test_b05_killed_mid_turn_is_continued_with_step_reset_and_attempt_2(make_bridge, sid, tid):
    first = make_bridge(options={"steps": 3, "delay": 0.1})
    with first.connect() as c:
        c.open(sid)
        c.start(sid, tid, "a b")
        before = _read_until(c, sid, tid, _in_step(1))
    second = _restart(first)
    try:
        with second.connect() as c:
            c.open(sid)
            assert c.start(sid, tid, "a b") == "continued"
            assert c.start(sid, tid, "a b") in ("running", "finished")
            parts, _, exit_ = c.read(sid, tid)
            tail, _, _ = c.read(sid, tid, after_step=1)
    finally:
        second.stop()
    assert exit_["_tag"] == "Success"
    # The log keeps every part, offsets never reused; a read skips the discarded attempt
    # (all but its step-reset), as afterStep says.
    logged = _logged(second, tid)
    assert [p["index"] for p in logged] == list(range(len(logged)))
    assert logged[: len(before)] == before
    assert parts == [p for p in logged if (p["step"], p["attempt"]) != (1, 1) or p["type"] == "step-reset"]
    (reset,) = [p for p in parts if p["type"] == "step-reset"]
    assert reset["step"] == 1 and reset["attempt"] == 1
    assert reset["discardedAttempt"] == 1 and reset["reason"] == "bridge restarted"
    assert reset["toolCallIds"] == ["echo-1"]
    starts = [(p["step"], p["attempt"]) for p in logged if p["type"] == "step-start"]
    assert starts == [(0, 1), (1, 1), (1, 2), (2, 1)]
    finishes = [(p["step"], p["attempt"]) for p in parts if p["type"] == "step-finish"]
    assert finishes == [(0, 1), (1, 2), (2, 1)]
    assert parts[-1]["type"] == "turn-finish" and parts[-1]["finishReason"] == "stop"
    # afterStep=1 skips step 0 and the discarded attempt, but keeps the reset itself.
    assert {(p["step"], p["attempt"]) for p in tail if p["step"] is not None} == {(1, 1), (1, 2), (2, 1)}
    assert [p["type"] for p in tail if (p["step"], p["attempt"]) == (1, 1)] == ["step-reset"]
    assert text_of(tail) == "a b" * 2
    # The session state counts this turn once.
    (state,) = [p for p in parts if p["type"] == "session-state"]
    assert state["state"]["data"] == {"turns": 1}


def test_b05_driver_gets_completed_steps_and_the_checkpointed_state(make_bridge, sid, tid):
    first = make_bridge(
        driver="bridge_test_drivers:make_stateful", agent_id="stateful", options={"steps": 3, "delay": 0.1}
    )
    with first.connect() as c:
        c.open(sid)
        c.start(sid, tid, "go")
        # Inside step 1, after its set_state({"step": 1}).
        before = _read_until(
            c, sid, tid, lambda ps: any(p["type"] == "text-delta" and p["step"] == 1 for p in ps)
        )
    states = [p["state"] for p in before if p["type"] == "session-state"]
    assert [s["data"] for s in states] == [{"step": 0}, {"step": 1}]
    second = _restart(first)
    try:
        with second.connect() as c:
            opened = c.open(sid)
            assert opened["data"] == {"step": 1}  # the store had it
            assert c.start(sid, tid, "go") == "continued"
            parts, _, _ = c.read(sid, tid)
    finally:
        second.stop()
    (reset,) = [p for p in parts if p["type"] == "step-reset"]
    after = parts[parts.index(reset) :]
    assert reset["toolCallIds"] == ["call-1-1"]
    # The state goes back to the checkpoint of step 0, as a higher revision.
    assert after[1]["type"] == "session-state"
    assert after[1]["state"]["data"] == {"step": 0}
    assert after[1]["state"]["revision"] == states[-1]["revision"] + 1
    (resume,) = [p for p in after if p["type"] == "data" and p["name"] == "resume"]
    assert resume["data"]["completedSteps"] == 1
    assert resume["data"]["steps"] == [
        ["step-start", "tool-call", "session-state", "text-delta", "text-delta", "text-delta", "step-finish"]
    ]
    assert resume["data"]["state"]["data"] == {"step": 0}
    assert [p["toolCallId"] for p in after if p["type"] == "tool-call"] == ["call-1-2", "call-2-1"]
    revisions = [p["state"]["revision"] for p in parts if p["type"] == "session-state"]
    assert revisions == sorted(revisions) and len(set(revisions)) == len(revisions)


def test_b05_reader_of_an_unfinished_turn_gets_the_rest_once_it_is_continued(make_bridge, sid, tid):
    first = make_bridge(options={"steps": 2, "delay": 0.1})
    with first.connect() as c:
        c.open(sid)
        c.start(sid, tid, "a b")
        _read_until(c, sid, tid, _in_step(0))
    second = _restart(first)
    try:
        with second.connect() as reader, second.connect() as starter:
            rid = reader.request("ReadTurn", {"sessionId": sid, "turnId": tid, "offset": 0, "afterStep": 0})
            got = reader.recv()
            assert got["_tag"] == "Chunk"  # what the store has, at once
            parts = list(got["values"])
            reader.send(frames.Ack(rid))
            starter.open(sid)
            assert starter.start(sid, tid, "a b") == "continued"
            while True:
                message = reader.recv()
                if message["_tag"] == "Exit":
                    break
                parts.extend(message["values"])
                reader.send(frames.Ack(rid))
    finally:
        second.stop()
    indexes = [p["index"] for p in parts]
    assert indexes == sorted(set(indexes))
    assert parts[-1]["finishReason"] == "stop"
    assert any(p["type"] == "step-reset" for p in parts)


def test_b05_cancel_of_an_unfinished_turn_finishes_it_at_once(make_bridge, sid, tid):
    first = make_bridge(options={"steps": 3, "delay": 0.1})
    with first.connect() as c:
        c.open(sid)
        c.start(sid, tid, "a b")
        _read_until(c, sid, tid, _in_step(0))
    second = _restart(first)
    try:
        with second.connect() as c:
            assert c.value("CancelTurn", {"sessionId": sid, "turnId": tid}) == {
                "turnId": tid,
                "status": "finished",
            }
            parts, _, _ = c.read(sid, tid)
            c.open(sid)
            assert c.start(sid, tid, "a b") == "finished"
    finally:
        second.stop()
    assert [p["type"] for p in parts[-2:]] == ["step-reset", "turn-finish"]
    assert parts[-1]["finishReason"] == "cancelled"


def test_b05_finished_turns_are_read_back_from_the_store_after_a_restart(make_bridge, sid, tid):
    first = make_bridge(options={"steps": 2})
    with first.connect() as c:
        c.open(sid)
        c.start(sid, tid, "kept")
        before, _, _ = c.read(sid, tid)
    second = _restart(first)
    try:
        with second.connect() as c:
            assert c.open(sid)["revision"] == 1
            after, _, _ = c.read(sid, tid)
            assert c.start(sid, tid, "kept") == "finished"
        counts = summary(os.path.join(second.state, "bridge.sqlite3"))  # while it runs
    finally:
        second.stop()
    assert after == before
    assert counts == {"sessions": 1, "turns": 1, "running": 0}


def test_summary_counts_unfinished_turns_without_a_bridge(make_bridge, sid, tid):
    bridge = make_bridge(options={"steps": 3, "delay": 0.1})
    with bridge.connect() as c:
        c.open(sid)
        c.open(sid + "-2")
        c.start(sid, tid, "a b")
        _read_until(c, sid, tid, _in_step(0))
    bridge.kill()
    assert summary(os.path.join(bridge.state, "bridge.sqlite3")) == {"sessions": 2, "turns": 1, "running": 1}


def test_driver_misuse_ends_the_turn_with_a_clear_error(make_bridge, sid, tid):
    bridge = make_bridge(driver="bridge_test_drivers:make_misuse", agent_id="misuse")
    with bridge.connect() as c:
        c.open(sid)
        c.start(sid, tid, "x")
        parts, _, _ = c.read(sid, tid)
    assert [p["type"] for p in parts] == ["turn-start", "turn-finish"]
    assert parts[-1]["finishReason"] == "error"
    assert parts[-1]["error"] == "RuntimeError: text() outside a step: call start_step() first"

"""Checks of the reused turn threads against a real bridge process: a
SIGTERM while several pooled threads wait idle for a turn ends the bridge at once (B09), and a
driver that fails at once still gets its turn-start committed before StartTurn answers (B03)."""
from __future__ import annotations

import signal
import time

import pytest

pytestmark = pytest.mark.timeout(60)


def test_b09_sigterm_with_idle_pooled_turn_threads_exits_promptly(make_bridge, sid):
    bridge = make_bridge(options={"steps": 1, "delay": 0.2})
    with bridge.connect() as c:
        c.open(sid)
        turns = [f"t{n}" for n in range(4)]
        for t in turns:  # four at once: four threads, all idle (pooled) once the turns end
            assert c.start(sid, t, "a b") == "started"
        for t in turns:
            parts, _, exit_ = c.read(sid, t)
            assert exit_["_tag"] == "Success" and parts[-1]["type"] == "turn-finish"
    time.sleep(0.2)  # the threads went back to the pool (they wait up to 30 s for a turn)
    asked = time.monotonic()
    bridge.signal(signal.SIGTERM)
    code = bridge.wait(10)
    took = time.monotonic() - asked
    assert code == 0, bridge.log()[-2000:]
    assert took < 5.0, f"SIGTERM took {took:.1f} s with idle turn threads"


def test_b03_a_driver_that_fails_at_once_has_its_turn_start_then_an_error_finish(make_bridge, sid):
    bridge = make_bridge(options={"steps": 1, "fail_at": 0})
    with bridge.connect() as c:
        c.open(sid)
        for n in range(3):  # the same pooled thread each time after the first
            assert c.start(sid, f"f{n}", "a b") == "started"
            parts, _, exit_ = c.read(sid, f"f{n}")
            assert exit_["_tag"] == "Success"
            kinds = [p["type"] for p in parts]
            assert kinds[0] == "turn-start" and kinds[-1] == "turn-finish", kinds
            assert [p["index"] for p in parts] == list(range(len(parts)))
            assert parts[-1]["finishReason"] == "error", parts[-1]

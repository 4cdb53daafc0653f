"""``TurnContext.reset_step`` (the driver-side ``step-reset`` the ``openai`` driver uses for a
model stream cut mid-answer): what it emits and where it is allowed. Through the real bridge
it is proven by test_driver_openai.py's stream-cut test; this pins the context's table."""

from __future__ import annotations

import threading

import pytest

from bridge_client.bridge.driver import TurnContext
from bridge_client.wire.parts import SessionState


class Sink:
    """Records parts; attempts grow like the bridge's (one more than any step-start seen)."""

    def __init__(self):
        self.parts = []
        self.attempts = {}

    def emit(self, kind, step, attempt, fields):
        if kind == "step-start":
            self.attempts[step] = attempt
        self.parts.append((kind, step, attempt, fields))
        return len(self.parts) - 1

    def next_attempt(self, step):
        return self.attempts.get(step, 0) + 1

    def finish_step(self, step, attempt, finish_reason, usage):
        self.emit("step-finish", step, attempt, {"finishReason": finish_reason})

    def set_state(self, data, step, attempt):
        return SessionState("s", 1, data)


def _ctx(sink):
    return TurnContext(
        prompt="p",
        session_id="s",
        turn_id="t",
        state=SessionState("s", 0, None),
        completed_steps=0,
        steps=[],
        cancelled=threading.Event(),
        sink=sink,
    )


def test_reset_step_discards_the_attempt_and_the_step_runs_again():
    sink = Sink()
    ctx = _ctx(sink)
    assert ctx.start_step() == 0
    ctx.tool_call("c1", "run_command", {"command": "ls"})
    ctx.text("partial")
    ctx.reset_step("model stream cut")
    assert ctx.step is None
    assert sink.parts[-1] == (
        "step-reset",
        0,
        1,
        {"discardedAttempt": 1, "reason": "model stream cut", "toolCallIds": ["c1"]},
    )
    assert ctx.start_step() == 0, "the same step again"
    assert ctx.attempt == 2
    ctx.reset_step("again")
    assert sink.parts[-1][3]["toolCallIds"] == [], "only the discarded attempt's calls are listed"
    ctx.start_step()
    ctx.finish_step()
    assert ctx.start_step() == 1


def test_reset_step_outside_a_step_or_after_the_turn_raises_and_writes_nothing():
    sink = Sink()
    ctx = _ctx(sink)
    with pytest.raises(RuntimeError, match="no step is open"):
        ctx.reset_step("x")
    with pytest.raises(TypeError):
        ctx.start_step()
        ctx.reset_step(None)  # type: ignore[arg-type]
    ctx.close()
    with pytest.raises(RuntimeError, match="turn is over"):
        ctx.reset_step("x")
    assert [p[0] for p in sink.parts] == ["step-start"]

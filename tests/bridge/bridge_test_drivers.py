"""Drivers for the bridge's tests, loaded by the bridge program as
``bridge_test_drivers:make_stateful`` (the harness puts this folder on PYTHONPATH)."""
from __future__ import annotations

from typing import Any

from bridge_client.bridge import TurnContext


class StatefulDriver:
    """Each step sets the session state to ``{"step": n}`` before its text, so a restart in
    the middle of a step must put the state back (B05). Reports what it was given to continue
    in a ``data`` part named ``resume``."""

    agent_id = "stateful"

    def __init__(self, steps: int, delay: float) -> None:
        self.steps = steps
        self.delay = delay

    def initial_state(self) -> Any:
        return {"step": None}

    def run_turn(self, ctx: TurnContext) -> None:
        ctx.data(
            "resume",
            {
                "completedSteps": ctx.completed_steps,
                "steps": [[p.type for p in s] for s in ctx.steps],
                "state": ctx.state.to_dict(),
            },
        )
        for _ in range(ctx.completed_steps, self.steps):
            step = ctx.start_step()
            ctx.tool_call(f"call-{step}-{ctx.attempt}", "noop", {})
            ctx.set_state({"step": step})
            for word in ("x", "y", "z"):
                if ctx.cancelled.wait(self.delay):
                    return
                ctx.text(word)
            ctx.finish_step()


def make_stateful(options: Any) -> StatefulDriver:
    options = options or {}
    return StatefulDriver(int(options.get("steps", 3)), float(options.get("delay", 0.1)))


class MisuseDriver:
    """Emits text before any step: the context must refuse it."""

    agent_id = "misuse"

    def run_turn(self, ctx: TurnContext) -> None:
        ctx.text("too early")


def make_misuse(options: Any) -> MisuseDriver:
    return MisuseDriver()

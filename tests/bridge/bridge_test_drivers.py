"""Drivers for the bridge's tests, loaded by the bridge program as
``bridge_test_drivers:make_stateful`` (the harness puts this folder on PYTHONPATH)."""
from __future__ import annotations

import os
import subprocess
import time
from typing import Any

from bridge_client.bridge import TurnContext
from bridge_client.bridge.driver import process_group_started


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


class StubbornDriver:
    """Ignores its cancel event. Each turn: a text, then a ``sleep 60`` child in its own process
    group (reported to the bridge; its pid written to ``stubborn.pid`` in the workspace), then
    ``hold`` seconds of not looking at the cancel, then a late text (``late.marker`` is
    written just before it) and the end of the step."""

    agent_id = "echo"

    def __init__(self, hold: float) -> None:
        self.hold = hold

    def run_turn(self, ctx: TurnContext) -> None:
        ctx.start_step()
        ctx.text("before ")
        child = subprocess.Popen(["sleep", "60"], start_new_session=True)
        process_group_started(child.pid)
        with open("stubborn.pid.tmp", "w") as f:
            f.write(str(child.pid))
        os.replace("stubborn.pid.tmp", "stubborn.pid")
        time.sleep(self.hold)  # the cancel event is not looked at
        with open("late.marker", "w") as f:
            f.write("late")
        ctx.text("late ")
        ctx.finish_step()


def make_stubborn(options: Any) -> StubbornDriver:
    return StubbornDriver(float((options or {}).get("hold", 3.0)))


class SwitchIntervalDriver:
    """Says the bridge process's GIL switch interval (``sys.getswitchinterval()``), in seconds."""

    agent_id = "switch"

    def run_turn(self, ctx: TurnContext) -> None:
        import sys

        ctx.start_step()
        ctx.text(repr(sys.getswitchinterval()))
        ctx.finish_step()


def make_switch(options: Any) -> SwitchIntervalDriver:
    return SwitchIntervalDriver()

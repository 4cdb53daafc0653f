"""Drivers for the first-commit tests (``first_commit_drivers:make_hold``; the harness puts
this folder on PYTHONPATH)."""
from __future__ import annotations

import os
import time
from typing import Any

from bridge_client.bridge.driver import TurnContext


class HoldDriver:
    """Emits ``step-start`` and the text ``before`` at once when ``burst`` is true, then waits
    (at most 20 s, in 10 ms sleeps) until the file ``options["release"]`` exists, then emits
    ``after`` and ends the step."""

    agent_id = "hold"

    def __init__(self, options: Any) -> None:
        self.release = options["release"]
        self.burst = bool(options.get("burst"))

    def run_turn(self, ctx: TurnContext) -> None:
        if self.burst:
            ctx.start_step()
            ctx.text("before ")
        deadline = time.monotonic() + 20.0
        while not os.path.exists(self.release) and time.monotonic() < deadline and not ctx.cancelled.is_set():
            time.sleep(0.01)
        if not self.burst:
            ctx.start_step()
        ctx.text("after")
        ctx.finish_step()


def make_hold(options: Any) -> HoldDriver:
    return HoldDriver(options)

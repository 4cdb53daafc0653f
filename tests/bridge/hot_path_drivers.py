"""Drivers for tests/bridge/test_hot_path_texts_and_kills.py: ``hot_path_drivers:make_odd`` emits odd
strings through ``ctx.text`` (the cached head/tail path); ``make_counter`` emits numbered
deltas, paced by ``options["delay"]`` seconds (0: as fast as it can)."""
from __future__ import annotations

from typing import Any, List

from bridge_client.bridge.driver import TurnContext

LONE: List[str] = ["lone \ud800 high", "lone \udfff low", "\udc80"]

ODD: List[str] = [
    "plain",
    '"quoted" \\ back\\slash',
    "nul\x00byte",
    "ctl\x01\x1f\x7f\n\r\t",
    "pair \U0001f600 emoji",
    "\u2028\u2029 separators",
    "</script>",
    "",
    "é" * 70_000,  # a long delta, past the inline-send size in JSON characters
    "x" * 300_000,
]


class OddDriver:
    agent_id = "echo"

    def initial_state(self) -> Any:
        return None

    def run_turn(self, ctx: TurnContext) -> None:
        for _ in range(2):
            ctx.start_step()
            for s in ODD:
                ctx.text(s)
            refused = 0
            for s in LONE:  # not valid Unicode: refused at the call, the step goes on
                try:
                    ctx.text(s)
                except ValueError:
                    refused += 1
            ctx.data("refused", refused)
            ctx.text("after")
            ctx.finish_step()


def make_odd(options: Any) -> OddDriver:
    return OddDriver()


class CounterDriver:
    agent_id = "echo"

    def __init__(self, count: int, delay: float, steps: int, size: int = 0) -> None:
        self.count, self.delay, self.steps, self.pad = count, delay, steps, "p" * size

    def initial_state(self) -> Any:
        return None

    def run_turn(self, ctx: TurnContext) -> None:
        for step in range(ctx.completed_steps, self.steps):
            ctx.start_step()
            for i in range(self.count):
                ctx.text(f"<{step}:{i}>{self.pad}")
                if self.delay and ctx.cancelled.wait(self.delay):
                    return
            ctx.finish_step()


def make_counter(options: Any) -> CounterDriver:
    options = options or {}
    return CounterDriver(
        int(options.get("count", 500)),
        float(options.get("delay", 0)),
        int(options.get("steps", 3)),
        int(options.get("size", 0)),
    )

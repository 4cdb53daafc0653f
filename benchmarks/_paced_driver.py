"""A benchmark driver that streams like a model driver: one ``ctx.text`` call per delta.

Runs inside the bridge (``--driver benchmarks._paced_driver:make_driver``; the benchmark puts
the repository root on the bridge's ``PYTHONPATH``). The prompt is a JSON object:

    n: int >= 1, text deltas to emit (one ``ctx.text`` each, never ``ctx.texts``).
    rate: deltas per second (an absolute schedule: delta ``i`` is due at ``t0 + i / rate``; a
        late delta goes at once, as a model stream read late would); 0 means no pacing.
    text: the delta's text (default ``"abcd"``, 4 characters).
    stamp: when true, the driver notes ``time.monotonic_ns()`` just before each ``ctx.text``
        and emits the list as one ``data`` part named ``emit-ns`` after the last delta (a side
        channel: the deltas stay exactly ``text``). CLOCK_MONOTONIC is the same clock in every
        process of the machine, so the host compares it with its own at yield.

One step per turn: ``step-start``, the deltas, (``emit-ns``), ``step-finish``.
"""
from __future__ import annotations

import json
import time
from typing import Any, List

from bridge_client.bridge.driver import TurnContext

__all__ = ["AGENT_ID", "PacedDriver", "make_driver"]

AGENT_ID = "paced-bench"


class PacedDriver:
    """The paced text driver (see the module docstring)."""

    agent_id = AGENT_ID

    def run_turn(self, ctx: TurnContext) -> None:
        """Emit the deltas the prompt asks for, one ``ctx.text`` each."""
        spec = json.loads(ctx.prompt)
        n = int(spec["n"])
        rate = float(spec.get("rate", 0))
        text = str(spec.get("text", "abcd"))
        stamp = bool(spec.get("stamp", False))
        stamps: List[int] = [0] * n if stamp else []
        ctx.start_step()
        emit = ctx.text
        if rate > 0:
            interval = 1.0 / rate
            t0 = time.monotonic()
            for i in range(n):
                wait = t0 + i * interval - time.monotonic()
                if wait > 0:
                    time.sleep(wait)  # what a driver blocked on its model's socket does
                if ctx.cancelled.is_set():
                    return
                if stamp:
                    stamps[i] = time.monotonic_ns()
                emit(text)
        else:
            for i in range(n):
                if stamp:
                    stamps[i] = time.monotonic_ns()
                emit(text)
                if not i & 1023 and ctx.cancelled.is_set():
                    return
        if stamp:
            ctx.data("emit-ns", stamps)
        ctx.finish_step()


def make_driver(options: Any) -> PacedDriver:
    """The driver factory the bridge calls (options are ignored: the prompt says it all)."""
    return PacedDriver()

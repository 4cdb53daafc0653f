"""Drivers for tests/bridge/test_perpart_path.py (the per-part path: one ``ctx.text``
per delta, as fast as it goes).

- ``perpart_drivers:make_fast``: ``steps`` steps of ``count`` deltas each (``delta(step, i)``,
  some non-ASCII or with JSON escapes; every 50th a ``ctx.reasoning`` delta); the first attempt
  of step 1 is reset after half of its deltas and run again, so a step's attempt changes under
  the per-step text appenders.
- ``perpart_drivers:make_misuse``: calls ``ctx.text`` wrongly (no step open, a non-str, a lone
  surrogate, after ``finish_step``/``reset_step``, after ``run_turn`` returned) and reports the
  error types it got in ``data`` parts; the good deltas between are the only text.
"""
from __future__ import annotations

import threading
from typing import Any

from bridge_client.bridge.driver import TurnContext

_ODD = ["é", '"', "\\", "\n", "\u2028", "\U0001f600", "</x>"]


def delta(step: int, i: int) -> str:
    """The ``i``-th delta of ``step``: short, every 97th one odd (non-ASCII, escapes)."""
    return _ODD[i % len(_ODD)] if i % 97 == 0 else f"{step}.{i};"


def is_reasoning(i: int) -> bool:
    """Whether the ``i``-th delta of a step is a ``reasoning-delta`` (else a ``text-delta``)."""
    return i % 50 == 25


class FastDriver:
    agent_id = "echo"

    def __init__(self, count: int, steps: int) -> None:
        self.count, self.steps = count, steps

    def initial_state(self) -> Any:
        return None

    def run_turn(self, ctx: TurnContext) -> None:
        step = ctx.completed_steps
        while step < self.steps:
            ctx.start_step()
            text, reasoning = ctx.text, ctx.reasoning
            n = self.count // 2 if step == 1 and ctx.attempt == 1 else self.count
            for i in range(n):
                (reasoning if is_reasoning(i) else text)(delta(step, i))
            if n < self.count:
                ctx.reset_step("a model stream cut, as a driver retries it")
                continue  # the same step again, attempt 2
            ctx.finish_step()
            step += 1


def make_fast(options: Any) -> FastDriver:
    options = options or {}
    return FastDriver(int(options.get("count", 20000)), int(options.get("steps", 3)))


class _Str(str):
    pass


def _error(call: Any) -> str:
    try:
        call()
    except Exception as exc:  # the type is what the test checks
        return type(exc).__name__
    return "none"


LATE_FILE = "late-text-error.txt"
"""Where the thread the misuse driver leaves behind writes the error its last ``ctx.text`` got
(in the bridge's working directory, the workspace)."""


class MisuseDriver:
    agent_id = "echo"

    def initial_state(self) -> Any:
        return None

    def run_turn(self, ctx: TurnContext) -> None:
        errors = [_error(lambda: ctx.text("before any step"))]
        ctx.start_step()
        ctx.text("a")
        errors += [
            _error(lambda: ctx.text(7)),  # type: ignore[arg-type]
            _error(lambda: ctx.text(b"bytes")),  # type: ignore[arg-type]
            _error(lambda: ctx.text(None)),  # type: ignore[arg-type]
            _error(lambda: ctx.text("lone \ud800")),
            _error(lambda: ctx.reasoning(7)),  # type: ignore[arg-type]
            _error(lambda: ctx.reasoning("lone \udfff")),
        ]
        ctx.text(_Str("b"))  # a str subclass is a str
        ctx.finish_step()
        errors.append(_error(lambda: ctx.text("after finish_step")))
        errors.append(_error(lambda: ctx.reasoning("after finish_step")))
        ctx.start_step()
        ctx.text("dropped")
        ctx.reset_step("retry")
        errors.append(_error(lambda: ctx.text("after reset_step")))
        ctx.start_step()
        ctx.text("c")
        ctx.data("errors", errors)
        # Return with the step open, leaving a thread that goes on calling ctx.text: its texts
        # count until the runner closes the context, then each call raises.
        started = threading.Event()
        threading.Thread(target=_late, args=(ctx, started), daemon=True).start()
        started.wait(5)


def _late(ctx: TurnContext, started: threading.Event) -> None:
    import time

    error = "none"
    deadline = time.monotonic() + 10
    while error == "none" and time.monotonic() < deadline:
        error = _error(lambda: ctx.text("late"))
        started.set()
    with open(LATE_FILE, "w", encoding="utf-8") as f:
        f.write(error)


def make_misuse(options: Any) -> MisuseDriver:
    return MisuseDriver()

"""The ``echo`` driver: answers every prompt with the prompt itself, deterministically, in
steps. For demos, tests and benchmarks.

Each step: ``step-start``; a ``tool-call`` and its ``tool-result`` (``echo-<step>``,
``{"step": step}``); the prompt as text deltas (joined, they equal the prompt);
``step-finish``. After the last step the session state becomes ``{"turns": previous + 1}``.

Options (``agent_options``, a JSON object or null):
    steps: int >= 1, steps per turn (default 1).
    delay: seconds >= 0 to wait before each part (default 0); cancel cuts it short.
    chunks: int >= 1, text deltas per step (default: one per word, whitespace kept).
    fail_at: a step number at which the turn raises RuntimeError (default: never).
"""
from __future__ import annotations

import re
from typing import Any, List, Optional

from ..bridge.driver import TurnContext
from ..driver_options import check_agent_options

__all__ = ["EchoDriver", "make_driver", "split_prompt"]

_BATCH = 256
"""Text deltas per :meth:`TurnContext.texts` call when there is no delay."""

_WORDS = re.compile(r"\s*\S+\s*|\s+")


def split_prompt(prompt: str, chunks: Optional[int] = None) -> List[str]:
    """Cut ``prompt`` into text deltas whose concatenation is ``prompt``.

    Args:
        prompt: the text.
        chunks: how many pieces (near-equal lengths; some may be empty when the prompt is
            shorter); ``None``: one piece per word, whitespace kept with the word before it.

    Returns:
        The pieces (none for an empty prompt when ``chunks`` is ``None``).
    """
    if chunks is None:
        return _WORDS.findall(prompt)
    n = len(prompt)
    return [prompt[i * n // chunks : (i + 1) * n // chunks] for i in range(chunks)]


class EchoDriver:
    """The echo agent (``agent_id`` ``"echo"``).

    Args:
        steps: steps per turn (>= 1). delay: seconds to wait before each part (>= 0).
        chunks: text deltas per step, or ``None`` for one per word.
        fail_at: the step number at which to raise ``RuntimeError``, or ``None``.
    """

    agent_id = "echo"

    def __init__(
        self, steps: int = 1, delay: float = 0.0, chunks: Optional[int] = None, fail_at: Optional[int] = None
    ) -> None:
        self.steps = steps
        self.delay = delay
        self.chunks = chunks
        self.fail_at = fail_at

    def initial_state(self) -> Any:
        """A new session's data: ``{"turns": 0}``."""
        return {"turns": 0}

    def _wait(self, ctx: TurnContext) -> bool:
        """Wait ``delay`` seconds before a part; return True when the turn was cancelled."""
        if self.delay > 0:
            return ctx.cancelled.wait(self.delay)
        return ctx.cancelled.is_set()

    def run_turn(self, ctx: TurnContext) -> None:
        """Echo the prompt in ``steps`` steps, continuing after ``ctx.completed_steps`` (a continued turn).

        Raises:
            RuntimeError: at step ``fail_at``, as asked.
        """
        deltas = split_prompt(ctx.prompt, self.chunks)
        for _ in range(ctx.completed_steps, self.steps):
            if self._wait(ctx):
                return
            step = ctx.start_step()
            if self.fail_at is not None and step == self.fail_at:
                raise RuntimeError(f"echo fails at step {step}, as its fail_at option asks")
            call_id = f"echo-{step}"
            if self._wait(ctx):
                return
            ctx.tool_call(call_id, "echo", {"step": step})
            if self._wait(ctx):
                return
            ctx.tool_result(call_id, "echo", {"step": step})
            if self.delay > 0:
                for delta in deltas:
                    if self._wait(ctx):
                        return
                    ctx.text(delta)
            else:
                # No delay: hand the deltas over in batches (the same parts), checking for a
                # cancel between batches.
                for i in range(0, len(deltas), _BATCH):
                    if ctx.cancelled.is_set():
                        return
                    ctx.texts(deltas[i : i + _BATCH])
            if self._wait(ctx):
                return
            ctx.finish_step()
        data = ctx.state.data
        previous = data.get("turns", 0) if isinstance(data, dict) else 0
        ctx.set_state({"turns": (previous if isinstance(previous, int) else 0) + 1})


def make_driver(options: Any) -> EchoDriver:
    """Make the echo driver from its options (see the module's docstring).

    Raises:
        ValueError: an option is unknown or of the wrong type.
    """
    options = check_agent_options("echo", options)  # the same check bridge_options() makes
    return EchoDriver(
        steps=options.get("steps", 1),
        delay=float(options.get("delay", 0)),
        chunks=options.get("chunks"),
        fail_at=options.get("fail_at"),
    )

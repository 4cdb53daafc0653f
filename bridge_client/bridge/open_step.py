"""The step a turn has open: its number and attempt, the tool-call ids of the attempt, and the
sink's per-delta appenders for it. :class:`~bridge_client.bridge.context.TurnContext` holds one
exactly while its step table is ``IN_STEP``.
"""
from __future__ import annotations

from typing import Callable, List, Optional

from .driver_types import TurnSink

__all__ = ["OpenStep"]


class OpenStep:
    """The open step: its number and attempt, the tool-call ids of the attempt (for
    ``reset_step``), and the sink's per-delta appenders for it (``None`` when the sink has
    none)."""

    __slots__ = ("step", "attempt", "call_ids", "append_text", "append_reasoning")

    def __init__(self, step: int, attempt: int, sink: TurnSink) -> None:
        self.step = step
        self.attempt = attempt
        self.call_ids: List[str] = []
        appender: Optional[Callable[[str, int, int], Callable[[str], int]]] = getattr(
            sink, "text_appender", None
        )
        self.append_text: Optional[Callable[[str], int]] = None
        self.append_reasoning: Optional[Callable[[str], int]] = None
        if appender is not None:
            self.append_text = appender("text-delta", step, attempt)
            self.append_reasoning = appender("reasoning-delta", step, attempt)

"""The read state of a turn, as values replaced whole (see :mod:`.turn`, "Exactly once").

A signal handler's ``KeyboardInterrupt`` can surface at almost any bytecode of the reading
thread, so the turn never mutates its read state: it builds a new :class:`ReadState` (or
:class:`Cursor`, :class:`Checkpoint`) with ``_replace`` and stores it in one attribute store.
They are NamedTuples: immutable, cheap to build on the per-part path, and readable by name.
"""
from __future__ import annotations

from typing import List, NamedTuple, Optional

from ..wire.parts import Part, TurnFinish

__all__ = ["CHECKPOINT_EVERY", "NO_CHECKPOINT", "Checkpoint", "Cursor", "ReadState"]

CHECKPOINT_EVERY = 64
"""Values converted between two checkpoints of a batch's conversion."""


class Cursor(NamedTuple):
    """Where the read of a turn stands (the reading thread's; replaced whole, never mutated)."""

    batch: int  # the number of the batch in ReadState.parts (one more per batch received)
    offset: int  # where the next ReadTurn starts: parts received (not only yielded) count
    after_step: int  # the afterStep of the next ReadTurn
    steps: int  # complete steps received
    done: bool  # turn-finish received


class ReadState(NamedTuple):
    """What the caller got of a turn, and where the read stands: ``Turn._st``, replaced in one
    store per part yielded and per batch published."""

    parts: List[Part]  # the parts of the last batch received (never mutated once published)
    yielded: int  # how many of them were yielded
    steps: int  # complete steps yielded
    finish: Optional[TurnFinish]  # turn-finish, once yielded
    started: bool  # turn-start yielded
    cursor: Cursor  # where the next read starts
    texts: int  # text chunks yielded (the first ``texts`` strings of Turn._texts count)

    @classmethod
    def first(cls, after_step: int) -> "ReadState":
        """The state before anything was read, skipping ``after_step`` complete steps."""
        return cls([], 0, after_step, None, False, Cursor(0, 0, after_step, after_step, False), 0)


class Checkpoint(NamedTuple):
    """How far the conversion of a batch got (every :data:`CHECKPOINT_EVERY` parts): after an
    interrupt the conversion goes on from here, it never starts over."""

    batch: int  # the batch number (-1: none)
    kept: int  # parts converted and kept
    used: int  # values used
    offset: int  # the cursor's offset, steps and done after those values
    steps: int
    done: bool


NO_CHECKPOINT = Checkpoint(-1, 0, 0, 0, 0, False)
"""The checkpoint of no batch."""

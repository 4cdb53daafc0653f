"""A :class:`~bridge_client.bridge.context.TurnContext`'s steps as one table of states and
moves (as h11 keeps its own): a driver is outside a step, inside one, or done (``run_turn``
returned); a move the table lacks is a driver bug and raises ``RuntimeError``.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

__all__ = ["IDLE", "IN_STEP", "CLOSED", "MOVES", "move", "check"]

# The context's state machine, as a table: (state, action) -> next state. A missing key is a
# driver bug; the method raises RuntimeError and nothing is written.
IDLE = "outside a step"
IN_STEP = "inside a step"
CLOSED = "closed"

MOVES: Dict[Tuple[str, str], str] = {
    (IDLE, "start_step"): IN_STEP,
    (IN_STEP, "part"): IN_STEP,
    (IN_STEP, "finish_step"): IDLE,
    (IN_STEP, "reset_step"): IDLE,
    (IDLE, "data"): IDLE,
    (IN_STEP, "data"): IN_STEP,
    (IDLE, "set_state"): IDLE,
    (IN_STEP, "set_state"): IN_STEP,
}

_HINTS = {
    (IDLE, "part"): "call start_step() first",
    (IDLE, "finish_step"): "no step is open",
    (IDLE, "reset_step"): "no step is open",
    (IN_STEP, "start_step"): "call finish_step() first",
}


def move(phase: str, action: str, name: str, step: Optional[int]) -> str:
    """Return the state after ``action`` in ``phase`` (``name``: the method, for the message;
    ``step``: the open step, or ``None``).

    Raises:
        RuntimeError: the table has no such move.
    """
    nxt = MOVES.get((phase, action))
    if nxt is None:
        if phase == CLOSED:
            raise RuntimeError(f"{name}() after run_turn() returned: the turn is over")
        hint = _HINTS.get((phase, action), "")
        where = phase if step is None else f"{phase} (step {step})"
        raise RuntimeError(f"{name}() {where}" + (f": {hint}" if hint else ""))
    return nxt


def check(phase: str, action: str, name: str, step: Optional[int]) -> None:
    """Raise like :func:`move` would, without moving (used before a write that may fail)."""
    if (phase, action) not in MOVES:
        move(phase, action, name, step)

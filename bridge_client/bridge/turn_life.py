"""A turn's life in the bridge as one table of states and moves (as h11 keeps
its own in ``_state.py``), and the exception that ends a driver's run of a turn.

States (:attr:`TurnLife.state`) and what ``StartTurn``/``CancelTurn`` report
(:attr:`TurnLife.status`):

- ``new``: built by ``StartTurn``, its thread started but not yet let go (``running``).
- ``running``: its thread runs the driver (``running``).
- ``orphan``: in the store, unfinished and not running: left by a restart, a shutdown or a
  failed store; the next ``StartTurn`` continues it (``orphan``).
- ``finished``: its ``turn-finish`` is written (``finished``).
- ``forcing``: the cancel grace ran out; the bridge is writing the turn's end itself and the
  driver's thread (still running, maybe) writes nothing more and changes no state (``running``).
- ``forced``: the bridge wrote that end (``finished``); the abandoned thread may still run.

Every move happens under the turn manager's lock. Whether the turn's log still takes the
driver's writes (``Turn.abandoned``) is not a state here: it is set under the turn's own
append lock, on the per-part path, by threads that may not take the manager's lock (the lock
order runs the other way), so it stays a flag beside this table.
"""
from __future__ import annotations

from typing import Dict, Tuple

__all__ = ["TurnLife", "IllegalTurnMove", "NEW", "RUNNING", "ORPHAN", "FINISHED", "FORCING", "FORCED"]

NEW = "new"
RUNNING = "running"
ORPHAN = "orphan"
FINISHED = "finished"
FORCING = "forcing"
FORCED = "forced"

# (state, move) -> next state. A missing key is a bug of the bridge: IllegalTurnMove.
MOVES: Dict[Tuple[str, str], str] = {
    (NEW, "launch"): RUNNING,  # StartTurn of a new turn: its thread is let go
    (ORPHAN, "launch"): RUNNING,  # StartTurn continues it (after a step-reset)
    (RUNNING, "end"): FINISHED,  # the thread wrote turn-finish and ended
    (RUNNING, "leave"): ORPHAN,  # the thread ended without turn-finish (shutdown, store failure)
    (ORPHAN, "cancel"): FINISHED,  # CancelTurn of an orphan: finished as cancelled at once
    (RUNNING, "force"): FORCING,  # the cancel grace ran out
    (FORCING, "forced"): FORCED,  # the bridge wrote the turn's end
}

# What each state reports on the wire (StartTurn, CancelTurn).
STATUS: Dict[str, str] = {
    NEW: "running",
    RUNNING: "running",
    ORPHAN: "orphan",
    FINISHED: "finished",
    FORCING: "running",
    FORCED: "finished",
}


class IllegalTurnMove(RuntimeError):
    """A move the table lacks was asked for (a bug of the bridge); the state is unchanged."""


class TurnLife:
    """The state of one turn's life; :meth:`move` is the only way to change it.

    Args:
        state: where the turn starts: ``new`` (a new turn), or ``orphan``/``finished`` (read
            back from the store), or ``running``.

    Raises:
        IllegalTurnMove: ``state`` is not one of the table's states.
    """

    __slots__ = ("state",)

    def __init__(self, state: str) -> None:
        if state not in STATUS:
            raise IllegalTurnMove(f"no turn state {state!r}")
        self.state = state

    @property
    def status(self) -> str:
        """``running``, ``orphan`` or ``finished``: what the RPCs report."""
        return STATUS[self.state]

    @property
    def forced(self) -> bool:
        """Whether the bridge ended the turn itself after the cancel grace (``forcing`` or ``forced``)."""
        return self.state in (FORCING, FORCED)

    def move(self, event: str) -> str:
        """Apply ``event``; return the new state.

        Raises:
            IllegalTurnMove: no such move from the current state (nothing changes).
        """
        nxt = MOVES.get((self.state, event))
        if nxt is None:
            raise IllegalTurnMove(f"a turn that is {self.state} cannot {event}")
        self.state = nxt
        return nxt

    def __repr__(self) -> str:
        return f"TurnLife({self.state!r})"


class _Abandoned(BaseException):
    """Raised into a turn's thread when the bridge shuts down (or its store failed): the turn
    is left unfinished in the store, to be continued after a restart. A BaseException
    so that a driver's ``except Exception`` does not swallow it."""

"""The life of a host connection as one table of states and moves (as h11 keeps its own in
``h11/_state.py``; the style guide's rule 2).

Every change of a :class:`~.connection.Connection`'s state goes through
:meth:`ConnectionLife.move`, with the connection's lock held (or in a forked child, where no
other thread of this process shares it). A move the table does not allow raises
:class:`IllegalMove` and changes nothing: it is a bug in this package, never the bridge's fault.

Moves (state, event -> new state):

- ``CONNECTING``: ``opened`` -> ``OPEN``; ``close`` -> ``CLOSING`` (a failed or interrupted open).
- ``OPEN``: ``close`` -> ``CLOSING``; ``cut-short`` -> ``BROKEN``; ``ended`` -> ``CLOSED``
  (the reader ended by itself: the connection dropped).
- ``BROKEN``: ``close`` -> ``CLOSING`` (without a close frame); ``ended`` -> ``CLOSED``.
- ``CLOSING``: ``ended`` -> ``CLOSED`` (every pending request failed).

``forked`` (the connection was inherited by a forked child) ends any state in ``CLOSED``.
Closing again, and an interrupted send after the close began, change nothing.
"""
from __future__ import annotations

import enum
from typing import Dict

__all__ = ["ConnectionLife", "Event", "IllegalMove", "State", "MOVES", "STOPPED"]


class State(enum.Enum):
    """Where a connection is in its life."""

    CONNECTING = "connecting"  # the upgrade is under way; no reader yet
    OPEN = "open"  # the reader runs; requests may be sent
    BROKEN = "broken"  # a send was cut short: the stream of frames is corrupt (no close frame)
    CLOSING = "closing"  # close() began: the socket is being aborted, the reader ends
    CLOSED = "closed"  # every pending request failed; nothing more happens


class Event(enum.Enum):
    """What happens to a connection."""

    OPENED = "opened"  # the upgrade finished; the reader is about to start
    CLOSE = "close"  # close() was called (by the host, a timeout, a lost connection)
    CUT_SHORT = "cut-short"  # a send was interrupted (KeyboardInterrupt) halfway
    ENDED = "ended"  # the pending requests were failed: the reader (or close) is done
    FORKED = "forked"  # this process is a forked child: the connection is the parent's


S, E = State, Event

MOVES: Dict[State, Dict[Event, State]] = {
    S.CONNECTING: {E.OPENED: S.OPEN, E.CLOSE: S.CLOSING, E.FORKED: S.CLOSED},
    S.OPEN: {E.CLOSE: S.CLOSING, E.CUT_SHORT: S.BROKEN, E.ENDED: S.CLOSED, E.FORKED: S.CLOSED},
    S.BROKEN: {E.CLOSE: S.CLOSING, E.CUT_SHORT: S.BROKEN, E.ENDED: S.CLOSED, E.FORKED: S.CLOSED},
    S.CLOSING: {E.CLOSE: S.CLOSING, E.CUT_SHORT: S.CLOSING, E.ENDED: S.CLOSED, E.FORKED: S.CLOSED},
    S.CLOSED: {E.CLOSE: S.CLOSED, E.CUT_SHORT: S.CLOSED, E.ENDED: S.CLOSED, E.FORKED: S.CLOSED},
}
"""state -> event -> new state; a missing key is an illegal move."""

STOPPED = frozenset({S.BROKEN, S.CLOSING, S.CLOSED})
"""States in which the connection counts as closed: nothing new may be sent."""


class IllegalMove(RuntimeError):
    """A move the table does not allow (a bug in bridge_client; the state is unchanged)."""


class ConnectionLife:
    """The state of one connection; see the module docstring. Not thread-safe by itself:
    the connection's lock guards it."""

    __slots__ = ("state",)

    def __init__(self) -> None:
        self.state = State.CONNECTING

    @property
    def stopped(self) -> bool:
        """True in ``BROKEN``, ``CLOSING`` and ``CLOSED``."""
        return self.state in STOPPED

    def move(self, event: Event) -> State:
        """Make the move for ``event`` and return the state before it.

        Raises:
            IllegalMove: the table has no such move from the current state (nothing changed).
        """
        old = self.state
        new = MOVES[old].get(event)
        if new is None:
            raise IllegalMove(f"a connection cannot go from {old.value} by {event.value}")
        self.state = new
        return old

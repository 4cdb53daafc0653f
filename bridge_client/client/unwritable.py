"""A bridge whose state directory cannot be written (a full disk): its launch error is
raised at once, also while a turn is read, instead of relaunching for the whole resend window.

:meth:`SessionChannel.with_connection <.channel.SessionChannel.with_connection>` turns a
``BridgeLaunchError`` of a session that was connected before into ``ConnectionLost``, which
the resend policy sends again for ``resend_window`` seconds: a bridge that died may be
launched again, and one that cannot start now may start in a moment. A full disk is not
such a crash: every launch fails the same way until someone frees space. So
:class:`UnwritableChannel` (the session's channel) carries a ``BridgeLaunchError`` whose
``unwritable`` is true past that conversion in :class:`Unwritable`, which is neither, and the
session's and the turn's calls and the turn's read raise the ``BridgeLaunchError`` again
(:func:`reraise`). The session is not released, and the turn stays the session's current
turn: once there is space, iterating it again reads on (each part once), and a new turn runs.

(Until the channel lets such an error through itself: see *Design notes*, "Issue 15 round 5
(r5-enospc)".)
"""
from __future__ import annotations

from typing import NoReturn, Optional

from ..errors import BridgeLaunchError, HarnessError
from .channel import SessionChannel
from .connection import Connection

__all__ = ["Unwritable", "UnwritableChannel", "reraise"]


class Unwritable(HarnessError):
    """Carries a ``BridgeLaunchError(unwritable=True)`` through the channel's resends (which
    would send a ``BridgeLaunchError`` again); never seen by a user: :func:`reraise` raises
    the error it carries.

    Attributes:
        error: the :class:`~bridge_client.errors.BridgeLaunchError`.
    """

    def __init__(self, error: BridgeLaunchError) -> None:
        self.error = error
        super().__init__(str(error))


def reraise(carrier: Unwritable) -> NoReturn:
    """Raise the ``BridgeLaunchError`` that ``carrier`` holds (with its own cause, not the
    carrier, as what it came from)."""
    error = carrier.error
    raise error from error.__cause__


class UnwritableChannel(SessionChannel):
    """A :class:`~.channel.SessionChannel` whose :meth:`connect` raises :class:`Unwritable`
    for a launch that failed because the bridge's state directory cannot be written."""

    def connect(self, timeout: Optional[float] = None) -> Connection:
        """As :meth:`SessionChannel.connect <.channel.SessionChannel.connect>`.

        Raises:
            Unwritable: the bridge's state directory cannot be written (see the module).
        """
        try:
            return super().connect(timeout)
        except BridgeLaunchError as exc:
            if exc.unwritable:
                raise Unwritable(exc) from None
            raise

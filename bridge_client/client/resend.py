"""The resend policy, as one tenacity value.

A request dropped with its connection is sent again over a new connection with exponential
backoff and jitter, for at most ``window`` seconds in total, measured on the monotonic clock
from the first attempt. ``stop_before_delay`` ends the policy *before* an attempt that would
start past the window, so the window is never overshot by a sleep. Only
:class:`~bridge_client.errors.ConnectionLost` and :class:`~bridge_client.errors.Overloaded` (the
bridge is at its bound of work and started nothing) are retried: ``Unauthorized``, other typed
RPC failures and protocol errors are final. Backoff sleeps wait on an Event, so releasing the session cuts
them short.
"""
from __future__ import annotations

import threading

import tenacity

from ..errors import ConnectionLost, Overloaded

__all__ = ["FIRST_BACKOFF", "MAX_BACKOFF", "RETRYABLE", "resend_policy", "backoff", "Backoff"]

FIRST_BACKOFF = 0.05
"""Seconds before the first resend."""

MAX_BACKOFF = 2.0
"""The longest pause between two resends, in seconds."""


def backoff() -> "tenacity.wait.wait_base":
    """The resend policy's wait: exponential from :data:`FIRST_BACKOFF` up to
    :data:`MAX_BACKOFF` seconds, plus up to ``FIRST_BACKOFF`` of jitter (the same as in
    :func:`resend_policy`)."""
    # Composed, because wait_exponential_jitter's arguments differ across tenacity 8/9.
    return tenacity.wait_exponential(multiplier=FIRST_BACKOFF, max=MAX_BACKOFF) + tenacity.wait_random(
        0, FIRST_BACKOFF
    )


class Backoff:
    """The resend policy's pauses one after another, for loops that are not a tenacity retry
    (the launcher's probes of a bridge's port): ``next()`` gives the next pause in seconds,
    ``reset()`` starts again from the first."""

    def __init__(self) -> None:
        self._wait = backoff()
        # Only attempt_number is read by the wait.
        self._state = tenacity.RetryCallState(None, None, (), {})  # type: ignore[arg-type]

    def next(self) -> float:
        """Return the pause before the next attempt, in seconds (and count the attempt)."""
        pause = float(self._wait(self._state))
        self._state.attempt_number += 1
        return pause

    def reset(self) -> None:
        """Start again from the first, shortest pause."""
        self._state.attempt_number = 1


RETRYABLE = (ConnectionLost, Overloaded)
"""The errors after which a request is sent again (within the resend window)."""


def resend_policy(window: float, cancelled: threading.Event) -> tenacity.Retrying:
    """Return the policy that sends a request again after ``ConnectionLost`` or
    ``Overloaded`` (the bridge is at a bound of its work).

    Args:
        window: seconds, from the first attempt, during which attempts may start.
        cancelled: when set (the session is released), no further attempt is made and any
            pause ends at once.

    Returns:
        A ``tenacity.Retrying`` that re-raises the last error when it gives up.
    """
    def pause(seconds: float) -> None:
        cancelled.wait(seconds)

    return tenacity.Retrying(
        stop=tenacity.stop_before_delay(window) | tenacity.stop_when_event_set(cancelled),
        # Exponential from FIRST_BACKOFF up to MAX_BACKOFF, plus up to FIRST_BACKOFF of jitter
        # (composed, because wait_exponential_jitter's arguments differ across tenacity 8/9).
        wait=tenacity.wait_exponential(multiplier=FIRST_BACKOFF, max=MAX_BACKOFF)
        + tenacity.wait_random(0, FIRST_BACKOFF),
        retry=tenacity.retry_if_exception_type(RETRYABLE),
        sleep=pause,
        reraise=True,
    )

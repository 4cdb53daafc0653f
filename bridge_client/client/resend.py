"""The resend policy (C08), as one tenacity value.

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

__all__ = ["FIRST_BACKOFF", "MAX_BACKOFF", "resend_policy"]

FIRST_BACKOFF = 0.05
"""Seconds before the first resend."""

MAX_BACKOFF = 2.0
"""The longest pause between two resends, in seconds."""


def resend_policy(window: float, cancelled: threading.Event) -> tenacity.Retrying:
    """Return the policy that sends a request again after ``ConnectionLost`` (C08) or
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
        retry=tenacity.retry_if_exception_type((ConnectionLost, Overloaded)),
        sleep=pause,
        reraise=True,
    )

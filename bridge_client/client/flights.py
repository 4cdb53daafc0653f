"""One launch at a time per bridge in a host process: single flight by key.

When many threads of one host find no bridge at once (a service creating 100 sessions), one
of them launches it and the others wait for that launch, then connect to the bridge it
started. A launch that fails fails every waiter with the same typed error; the next call
tries again. See the *Performance* guide (``performance``).
"""
from __future__ import annotations

import copy
import os
import threading
import time
from typing import Callable, Dict, Generic, Hashable, Optional, TypeVar

from ..errors import HarnessError

__all__ = ["Flight", "SingleFlight"]

T = TypeVar("T")

_WAKE = 0.5  # seconds between a waiter's looks at its own deadline (the end of a flight wakes it at once)


class Flight:
    """One run in progress.

    Attributes:
        launched_at: ``time.monotonic()`` when the leader started what the waiters wait for
            (the bridge's spawn), or ``None`` before; waiters count their deadline from it.
        waiters: threads waiting for this run now.
    """

    __slots__ = ("done", "error", "launched_at", "waiters")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: Optional[HarnessError] = None
        self.launched_at: Optional[float] = None
        self.waiters = 0


class SingleFlight(Generic[T]):
    """Runs at most one ``lead`` per key at a time in this process; the other callers wait."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flights: Dict[Hashable, Flight] = {}
        if hasattr(os, "register_at_fork"):  # a forked child has none of its parent's runs
            os.register_at_fork(after_in_child=self._after_fork)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()
        self._flights = {}

    def waiters(self, key: Hashable) -> int:
        """How many threads wait for the run of ``key`` now (0 when none runs)."""
        with self._lock:
            flight = self._flights.get(key)
            return flight.waiters if flight is not None else 0

    def run(
        self,
        key: Hashable,
        lead: Callable[[Flight], T],
        limit: Callable[[Flight], Optional[float]],
    ) -> Optional[T]:
        """Run ``lead(flight)`` unless another thread runs it for ``key``; then wait for that run.

        Args:
            key: what the run is for (a sandbox and a bridge's state directory).
            lead: the run; it may set ``flight.launched_at``.
            limit: for a waiter, the ``time.monotonic()`` instant it stops waiting
                (``None``: no limit yet), asked again every half second and when woken.

        Returns:
            What ``lead`` returned, in the thread that ran it; ``None`` in a thread that
            waited for a run that succeeded or was interrupted (it looks again itself).

        Raises:
            HarnessError: the run failed with it (each waiter gets a copy of the same type and
                message, with the same attributes).
            TimeoutError: a waiter reached its limit before the run ended.
        """
        with self._lock:
            flight = self._flights.get(key)
            leader = flight is None
            if flight is None:
                flight = self._flights[key] = Flight()
            else:
                flight.waiters += 1
        if leader:
            try:
                return lead(flight)
            except HarnessError as exc:
                flight.error = exc
                raise
            finally:
                with self._lock:
                    if self._flights.get(key) is flight:
                        del self._flights[key]
                flight.done.set()
        try:
            while not flight.done.is_set():
                end = limit(flight)
                now = time.monotonic()
                if end is not None and now >= end:
                    raise TimeoutError("the launch another thread runs did not end in time")
                flight.done.wait(_WAKE if end is None else min(_WAKE, end - now))
        finally:
            with self._lock:
                flight.waiters -= 1
        if flight.error is not None:
            raise _same_error(flight.error)
        return None


def _same_error(exc: HarnessError) -> HarnessError:
    """A copy of ``exc`` for another thread to raise (each raise writes its own traceback)."""
    try:
        twin = copy.copy(exc)
    except Exception:  # an exception class that cannot be copied: share the one
        return exc
    if type(twin) is not type(exc) or str(twin) != str(exc):
        return exc
    twin.__traceback__ = None
    return twin

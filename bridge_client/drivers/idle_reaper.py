"""The thread that stops agent processes left unused (a driver's ``agent_idle_timeout``): what
the warm drivers share (the ``acp`` driver's agents, :mod:`bridge_client.drivers.warm_cli`'s
CLI processes). The driver says what to stop; this module only says when to look."""
from __future__ import annotations

import threading
import time
from typing import Callable, Optional

__all__ = ["IdleReaper", "DEFAULT_IDLE_TIMEOUT"]

DEFAULT_IDLE_TIMEOUT = 600.0
"""Seconds an agent process may stay unused before it is stopped (``agent_idle_timeout``)."""


class IdleReaper:
    """Calls ``reap(now)`` every ``min(timeout / 4, 30)`` seconds (at least 0.05) from a daemon
    thread, started by :meth:`start` (the driver's first agent) and ended by :meth:`close`.

    Args:
        timeout: seconds > 0 an agent may stay unused, or ``None``: never look.
        reap: stops the agents unused ``timeout`` seconds as of ``now`` (``time.monotonic()``)
            and returns how many it stopped.
    """

    def __init__(self, timeout: Optional[float], reap: Callable[[float], int]) -> None:
        self.timeout = timeout
        self._reap = reap
        self._closed = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the thread (once; nothing without a timeout or after :meth:`close`)."""
        with self._lock:
            if self.timeout is None or self._thread is not None or self._closed.is_set():
                return
            self._thread = threading.Thread(target=self._run, name="idle-reaper", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """End the thread (the driver is closing); returns at once."""
        self._closed.set()

    def reap(self) -> int:
        """Look now: stop what has been unused ``timeout`` seconds; returns how many."""
        return 0 if self.timeout is None else self._reap(time.monotonic())

    def _run(self) -> None:
        assert self.timeout is not None
        tick = max(0.05, min(self.timeout / 4, 30.0))  # a tiny timeout is no busy loop
        while not self._closed.wait(tick):
            self.reap()

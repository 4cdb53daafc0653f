"""The bridge's idle watcher: the bridge exits after ``idle_timeout`` seconds with no
connection open and no turn running."""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

__all__ = ["IdleWatcher"]

log = logging.getLogger("bridge_client.bridge.server")  # one logger for all the server's modules


class IdleWatcher:
    """Calls ``on_idle`` once, after ``idle_timeout`` seconds with no connection open and no
    turn running. Its thread waits on a condition, woken only when the bridge becomes idle
    (or the watcher stops); it never polls.

    Args:
        idle_timeout: in seconds.
        on_idle: called from the watcher's thread; must not block for long.

    Call :meth:`start` once the bridge listens (the idle time counts from then).
    """

    def __init__(self, idle_timeout: float, on_idle: Callable[[], None]) -> None:
        self.idle_timeout = idle_timeout
        self._on_idle = on_idle
        self._cond = threading.Condition()
        self._connections = 0
        self._running = 0
        self._since = time.monotonic()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="bridge-idle", daemon=True)

    def start(self) -> None:
        """Start counting idle time from now."""
        with self._cond:
            self._since = time.monotonic()
        self._thread.start()

    def _changed(self) -> None:
        # Caller holds the condition. Idle time restarts at every change. The thread is woken
        # only when the bridge became idle: while busy it waits without a deadline, and a
        # change while idle (a connection opening) is seen at its deadline, where it looks
        # again. A busy bridge's connections and turns thus wake nobody here.
        self._since = time.monotonic()
        if not (self._connections or self._running):
            self._cond.notify_all()

    def connection_opened(self) -> None:
        """A WebSocket connection opened."""
        with self._cond:
            self._connections += 1
            self._changed()

    def connection_closed(self) -> None:
        """A WebSocket connection closed."""
        with self._cond:
            self._connections -= 1
            self._changed()

    def set_running(self, count: int) -> None:
        """The number of running turns is now ``count``."""
        with self._cond:
            self._running = count
            self._changed()

    def stop(self) -> None:
        """Stop watching (idempotent); ``on_idle`` is not called after this."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def _run(self) -> None:
        with self._cond:
            while not self._stopped:
                if self._connections or self._running:
                    self._cond.wait()
                    continue
                remaining = self._since + self.idle_timeout - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            if self._stopped:
                return
        log.info("idle for %s s with no connection and no running turn", self.idle_timeout)
        self._on_idle()

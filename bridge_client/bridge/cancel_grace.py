"""The cancel grace: a cancelled turn's driver has ``cancel_grace`` seconds to end the turn;
then the bridge ends it itself (see :meth:`~bridge_client.bridge.turns.TurnManager.cancel_turn`).

:class:`GraceWatcher` keeps the cancelled turns' deadlines in a heap, watched by one thread
started with the first cancel (and ended when nothing is left to watch).
"""
from __future__ import annotations

import heapq
import logging
import threading
import time
from typing import Callable, List, Optional, Tuple

from .turn_log import Turn

__all__ = ["GraceWatcher"]

log = logging.getLogger("bridge_client.bridge.turns")  # one logger for the turn runtime


class GraceWatcher:
    """Calls ``expired(turn, run)`` once a watched turn's grace ran out (in the watcher's
    thread, holding no lock; an exception it raises is logged). Every method may be called
    from any thread.
    """

    def __init__(self, expired: Callable[[Turn, object], None]) -> None:
        self._expired = expired
        # Cancelled turns' deadlines: (deadline, sequence, turn, its run), a heap watched by
        # one thread started with the first cancel.
        self._cond = threading.Condition(threading.Lock())
        self._heap: List[Tuple[float, int, Turn, object]] = []
        self._seq = 0
        self._thread: Optional[threading.Thread] = None
        self._closed = False

    def watch(self, turn: Turn, run: object, grace: float) -> None:
        """Give the run ``run`` of ``turn`` (what names that run: its context) ``grace``
        seconds from now."""
        with self._cond:
            self._seq += 1
            deadline = time.monotonic() + grace
            heapq.heappush(self._heap, (deadline, self._seq, turn, run))
            self._cond.notify_all()
            if self._thread is None:
                watcher = threading.Thread(target=self._loop, name="bridge-cancel-grace", daemon=True)
                try:
                    watcher.start()
                except RuntimeError as exc:
                    # No thread for the watcher now: the next cancel tries again; until then
                    # this turn gets only the cancel event (logged, never a failed RPC).
                    log.warning("cannot start the cancel-grace watcher (%s); will try again", exc)
                    return
                self._thread = watcher

    def close(self) -> None:
        """Forget every deadline and end the watcher's thread (the bridge shuts down)."""
        with self._cond:
            self._closed = True
            self._heap.clear()
            self._cond.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._closed:
                        self._thread = None
                        return
                    if not self._heap:
                        self._thread = None  # nothing to watch: the next cancel starts one
                        return
                    wait = self._heap[0][0] - time.monotonic()
                    if wait <= 0:
                        _, _, turn, run = heapq.heappop(self._heap)
                        break
                    self._cond.wait(wait)
            try:
                self._expired(turn, run)
            except Exception:
                log.exception("turn %s: ending it after the cancel grace failed", turn.id)

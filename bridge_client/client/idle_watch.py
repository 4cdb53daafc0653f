"""One idle watcher per host process: a single thread that looks at each open session's
connection when its idle deadline comes, instead of a thread per session.

A session registers its channel (:meth:`IdleWatch.watch`) when it connects; the watcher calls
the channel's ``idle_look()`` at the deadline it was given, which closes the connection when
it went unused for the session's ``idle_timeout`` and otherwise says when to look again (a
use in progress ends later than now, so looking again one ``idle_timeout`` later is never
late). Nothing wakes the watcher on each use: a use only moves the deadline later.

Threads: one daemon thread, ``bridge-client-idle-watch``, lives while any channel is
watched; it ends when the last one is forgotten (release, drop) or closed, and starts again
with the next. A forked child starts with no watcher and no watched channel.
"""
from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
from typing import List, Optional, Protocol, Tuple

__all__ = ["IdleWatch", "Watched", "WATCH", "THREAD_NAME"]

log = logging.getLogger("bridge_client")

THREAD_NAME = "bridge-client-idle-watch"

_LONGEST_WAIT = 3600.0  # seconds; an idle_timeout of inf must not overflow the lock's wait


class Watched(Protocol):
    """What the watcher looks at (a session's channel)."""

    def idle_look(self) -> Optional[float]:
        """Close the connection if it is idle; return the ``time.monotonic()`` instant to look
        again, or ``None`` when there is nothing more to watch."""


class IdleWatch:
    """The deadlines of the watched channels and the thread that keeps them (see the module)."""

    def __init__(self) -> None:
        self._reset()
        if hasattr(os, "register_at_fork"):  # the parent's thread and channels are not the child's
            os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._heap: List[Tuple[float, int, Watched]] = []
        self._seq = itertools.count()
        self._thread: Optional[threading.Thread] = None
        self._wake_at: Optional[float] = None  # when the thread, waiting, looks next
        self._looking: Optional[Watched] = None  # the item the thread looks at now (off the heap)
        self._forgot_looking = False  # forget() came for it meanwhile: do not put it back

    def watch(self, item: Watched, due: float) -> None:
        """Look at ``item`` at ``due`` (``time.monotonic()``), starting the thread if none runs.

        Raises:
            RuntimeError: the thread cannot be started (``item`` is not watched then).
        """
        with self._cond:
            heapq.heappush(self._heap, (due, next(self._seq), item))
            thread = self._thread
            if thread is None:
                thread = self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
            else:
                if self._wake_at is not None and due < self._wake_at:
                    self._cond.notify()
                return
        try:
            thread.start()
        except BaseException:  # no thread (or an interrupt): not watched, and the next call starts one
            with self._cond:
                if self._thread is thread:
                    self._thread = None
                self._remove(item)
            raise

    def forget(self, item: Watched) -> None:
        """Stop watching ``item``. When nothing is left to watch, the thread ends, and is
        waited for (at most 5 s) unless it is looking at another item, is the caller, or
        another item is watched meanwhile: the last session released leaves no thread behind."""
        with self._cond:
            if self._looking is item:
                self._forgot_looking = True
                return
            if not self._remove(item) or self._heap:
                return
            self._cond.notify()
            thread = self._thread if self._looking is None else None
        if thread is None or thread is threading.current_thread() or thread.ident is None:
            return
        deadline = time.monotonic() + 5.0
        while thread.is_alive() and time.monotonic() < deadline:
            thread.join(timeout=0.05)
            with self._cond:
                if self._heap:  # another channel is watched meanwhile: the thread goes on
                    return

    def watching(self) -> int:
        """How many channels are watched now."""
        with self._cond:
            return len(self._heap)

    def _remove(self, item: Watched) -> bool:
        kept = [entry for entry in self._heap if entry[2] is not item]
        if len(kept) == len(self._heap):
            return False
        heapq.heapify(kept)
        self._heap = kept
        return True

    def _run(self) -> None:
        me = threading.current_thread()
        while True:
            with self._cond:
                if self._thread is not me:
                    return
                if not self._heap:
                    self._thread = None
                    return
                due, _, item = self._heap[0]
                now = time.monotonic()
                if due > now:
                    self._wake_at = due
                    self._cond.wait(min(due - now, _LONGEST_WAIT))
                    self._wake_at = None
                    continue
                heapq.heappop(self._heap)
                self._looking, self._forgot_looking = item, False
            try:
                again = item.idle_look()  # outside the lock: it may close a connection
            except Exception:  # a bug in one channel must not stop the others' timers
                log.exception("the idle look at %r failed", item)
                again = None
            with self._cond:
                if again is not None and not self._forgot_looking:
                    heapq.heappush(self._heap, (again, next(self._seq), item))
                self._looking = None


WATCH = IdleWatch()
"""The process's idle watcher."""

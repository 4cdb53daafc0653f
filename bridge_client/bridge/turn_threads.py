"""The threads that run a bridge's turns: one per running turn, and a thread whose turn ended
waits a while for the next one, so that ``StartTurn`` seldom starts a thread (a thread's start
waits for the new thread to be scheduled: about 0.1 ms on a quiet machine, up to a millisecond
on a busy one, on the way to every new turn's first part).

:class:`TurnThreads` hands a job to an idle thread, or starts a new one when none is idle.
At most ``max_idle`` threads wait, each for at most ``idle_seconds``; :meth:`TurnThreads.close`
ends the waiting ones at once, and a busy one once its job returns.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, List, Optional

__all__ = ["TurnThreads", "Worker", "IDLE_SECONDS", "MAX_IDLE"]

log = logging.getLogger("bridge_client.bridge.turns")  # one logger for the turn runtime

IDLE_SECONDS = 30.0
"""Seconds a turn thread whose turn ended waits for another turn before it ends."""

MAX_IDLE = 4
"""Turn threads waiting for a turn, at most; a thread whose turn ends beyond them ends."""

IDLE_NAME = "bridge-turn-idle"
"""The name of a turn thread while it waits for a turn."""


class Worker:
    """One thread of the pool: its next job (``None`` while it has none), whether it is
    reserved for a job to come (:meth:`TurnThreads.reserve`), and the condition (on the pool's
    lock) that wakes it alone. ``thread`` is the thread."""

    __slots__ = ("job", "reserved", "wake", "thread")

    def __init__(self, lock: threading.Lock) -> None:
        self.job: Any = None
        self.reserved = True
        self.wake = threading.Condition(lock)
        self.thread: Optional[threading.Thread] = None


class TurnThreads:
    """Runs ``run(job)`` in a thread of its own for each :meth:`start`, reusing the threads
    whose job returned (see the module docstring). Thread-safe.

    Args:
        run: what a thread does with a job; it must not raise (an exception is logged).
        idle_seconds: seconds an idle thread waits for a job before it ends.
        max_idle: idle threads kept, at most.
    """

    def __init__(
        self, run: Callable[[Any], None], idle_seconds: float = IDLE_SECONDS, max_idle: int = MAX_IDLE
    ) -> None:
        self._run = run
        self._idle_seconds = idle_seconds
        self._max_idle = max_idle
        self._lock = threading.Lock()
        self._idle: List[Worker] = []  # guarded by _lock; the most recently idle last
        self._closed = False

    def reserve(self, name: str) -> Worker:
        """A thread for a job given later with :meth:`go`: an idle one, or a new one, named
        ``name``; it waits for that job (and is woken once, by :meth:`go`).

        Raises:
            RuntimeError: no thread is idle and none can be started (``Thread.start``'s).
        """
        with self._lock:
            if self._idle:
                worker = self._idle.pop()
                worker.reserved = True
                assert worker.thread is not None
                worker.thread.name = name
                return worker
        worker = Worker(self._lock)
        thread = threading.Thread(target=self._loop, args=(worker,), name=name, daemon=True)
        worker.thread = thread
        thread.start()
        return worker

    def go(self, worker: Worker, job: Any) -> None:
        """Give a reserved thread its job: it runs ``run(job)`` now."""
        with self._lock:
            worker.job = job
            worker.reserved = False
            worker.wake.notify()

    def start(self, job: Any, name: str) -> threading.Thread:
        """Run ``run(job)`` in an idle thread, or in a new one, named ``name`` while it runs
        (:meth:`reserve` and :meth:`go` at once). Returns the thread (it may have run other
        jobs before, and may run others after). Raises as :meth:`reserve`."""
        worker = self.reserve(name)
        self.go(worker, job)
        assert worker.thread is not None
        return worker.thread

    @property
    def idle(self) -> int:
        """How many threads wait for a job now."""
        with self._lock:
            return len(self._idle)

    def close(self) -> None:
        """Take no thread back: the idle ones end now, a busy one once its job returns.
        Idempotent; :meth:`start` still runs a job (in a new thread) after it."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            for worker in idle:
                worker.wake.notify()

    def _loop(self, worker: Worker) -> None:
        with self._lock:
            while worker.job is None:  # reserved: its first job comes with go()
                worker.wake.wait()
        while True:
            job, worker.job = worker.job, None
            try:
                self._run(job)
            except Exception:  # pragma: no cover - run() handles its own; never lose the thread quietly
                log.exception("a turn thread's job failed")
            job = None
            if not self._wait_job(worker):
                return

    def _wait_job(self, worker: Worker) -> bool:
        """Wait idle for the next job; False when the thread is to end (closed, too many idle,
        or none came within ``idle_seconds``)."""
        thread = worker.thread
        with self._lock:
            if self._closed or len(self._idle) >= self._max_idle:
                return False
            if thread is not None:
                thread.name = IDLE_NAME
            self._idle.append(worker)
            deadline = time.monotonic() + self._idle_seconds
            while worker.job is None:
                if worker.reserved:  # reserve() took it out of _idle: its job comes with go()
                    worker.wake.wait()
                    continue
                left = deadline - time.monotonic()
                if self._closed or left <= 0:
                    break
                worker.wake.wait(left)
            if worker.job is not None:
                return True
            if worker in self._idle:  # (close() emptied _idle already)
                self._idle.remove(worker)
            return False

"""One idle watcher thread per host process instead of one idle timer per session (C06):
each session's connection still closes at its own idle_timeout, a use moves the deadline, and
the last release leaves no thread behind."""
from __future__ import annotations

import threading
import time
from typing import List, Optional

import pytest

import bridge_client as bc
from bridge_client.client import idle_watch
from host_support import options, session_options, wait_until

pytestmark = pytest.mark.timeout(60)


def _idle_threads() -> List[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("bridge-client-idle")]


def test_c06_many_open_sessions_share_one_idle_thread_and_each_closes_at_its_own_timeout(sandbox):
    short = [bc.create_session(options("echo"), session_options(sandbox, idle_timeout=0.3)) for _ in range(3)]
    long = [bc.create_session(options("echo"), session_options(sandbox, idle_timeout=30.0)) for _ in range(3)]
    try:
        for session in long + short:
            list(session.turn("x"))
        assert all(s.connected for s in short + long)
        assert len(_idle_threads()) == 1, _idle_threads()
        assert wait_until(lambda: not any(s.connected for s in short), timeout=5)
        assert all(s.connected for s in long), "a session closed before its own idle_timeout"
        assert len(_idle_threads()) == 1
        parts = list(short[0].turn("again"))  # reconnects, watched again
        assert parts[-1].finish_reason == "stop" and short[0].connected
    finally:
        for session in short + long:
            session.release()
    assert not _idle_threads(), "the last release left the idle watcher running"
    assert idle_watch.WATCH.watching() == 0


def test_c06_use_moves_the_deadline_and_a_long_read_is_never_cut(sandbox):
    opts = options("echo", agent_options={"steps": 5, "delay": 0.15})
    with bc.create_session(opts, session_options(sandbox, idle_timeout=0.25)) as session:
        list(session.turn("warm"))
        conn = session._conn
        parts = list(session.turn("slow"))  # 0.75 s of reading, three idle timeouts
        assert parts[-1].finish_reason == "stop"
        assert session._conn is conn, "the connection was closed while a turn was being read"
        assert wait_until(lambda: not session.connected, timeout=5)


class _Item:
    def __init__(self, answers: List[Optional[float]]) -> None:
        self.answers = answers
        self.looks = 0

    def idle_look(self) -> Optional[float]:
        self.looks += 1
        return self.answers.pop(0) if self.answers else None


def test_the_watcher_looks_when_due_again_when_asked_and_ends_with_nothing_to_watch():
    watch = idle_watch.IdleWatch()
    item = _Item([time.monotonic() + 0.05])
    late = _Item([])
    watch.watch(late, time.monotonic() + 30.0)
    watch.watch(item, time.monotonic() + 0.02)  # earlier than the thread's wait: wakes it
    assert wait_until(lambda: item.looks == 2, timeout=5)
    assert late.looks == 0 and watch.watching() == 1
    watch.forget(late)
    assert watch.watching() == 0
    assert wait_until(lambda: watch._thread is None, timeout=5)


def test_a_watcher_whose_thread_cannot_start_watches_nothing_and_starts_with_the_next(monkeypatch):
    watch = idle_watch.IdleWatch()
    real_start = threading.Thread.start

    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    with pytest.raises(RuntimeError):
        watch.watch(_Item([]), time.monotonic())
    assert watch.watching() == 0 and watch._thread is None
    monkeypatch.setattr(threading.Thread, "start", real_start)
    item = _Item([])
    watch.watch(item, time.monotonic())
    assert wait_until(lambda: item.looks == 1 and watch._thread is None, timeout=5)


def test_an_endless_idle_timeout_does_not_stop_the_watcher_for_the_others():
    watch = idle_watch.IdleWatch()
    endless = _Item([])
    soon = _Item([])
    watch.watch(endless, float("inf"))
    watch.watch(soon, time.monotonic() + 0.02)
    assert wait_until(lambda: soon.looks == 1, timeout=5)
    assert watch._thread is not None and watch._thread.is_alive() and endless.looks == 0
    watch.forget(endless)
    assert wait_until(lambda: watch._thread is None, timeout=5)


def test_c06_the_last_release_does_not_wait_for_a_watcher_that_another_session_keeps(monkeypatch):
    # Session A is released (the last one watched: forget() waits for the thread to end) just
    # as session B connects (watch()): the thread goes on for B, so A's release must not wait
    # out the 5 s join for a thread that will not end.
    watch = idle_watch.IdleWatch()
    a, b = _Item([]), _Item([])
    watch.watch(a, time.monotonic() + 30.0)
    real_join = threading.Thread.join
    joined: List[float] = []

    def watch_b_then_join(self: threading.Thread, timeout: Optional[float] = None) -> None:
        if self.name == idle_watch.THREAD_NAME and not joined:
            joined.append(timeout or 0.0)
            watch.watch(b, time.monotonic() + 30.0)  # B connects between A's forget and its join
        real_join(self, timeout)

    monkeypatch.setattr(threading.Thread, "join", watch_b_then_join)
    began = time.monotonic()
    watch.forget(a)
    spent = time.monotonic() - began
    monkeypatch.setattr(threading.Thread, "join", real_join)
    assert spent < 2.0, f"release waited {spent:.1f} s for the watcher that B keeps"
    assert watch.watching() == 1 and watch._thread is not None and watch._thread.is_alive()
    watch.forget(b)
    assert watch._thread is None or not watch._thread.is_alive()

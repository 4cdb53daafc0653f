"""B03, the store's waits: ``OpenSession`` and ``CloseSession`` commit their own write in the
calling thread without waking the store's writer, and a thread waiting for its commit is
woken by the commit that covers its ticket only (not by every commit of the group commit),
by the store's failure, or by its timeout, with nothing left behind.

A turn manager in this process over a real store (SQLite, ``synchronous=FULL``).
"""
from __future__ import annotations

import threading
import time
from typing import Any, Iterator, List

import pytest

from bridge_client.bridge.store import Store, StoreError, session_op
from bridge_client.bridge.turns import TurnManager
from bridge_client.drivers import echo

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def store(tmp_path) -> Iterator[Store]:
    st = Store(str(tmp_path / "s.sqlite3"))
    try:
        yield st
    finally:
        st.close()


def _until(test: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not test():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_open_and_close_session_commit_in_their_thread_without_waking_the_writer(store):
    manager = TurnManager(store, echo.EchoDriver(), agent_id="echo", bridge_id="b" * 32)
    assert _until(lambda: store._writer_waiting)  # the writer sleeps: a wake would be a notify
    wakes: List[str] = []
    notify = store._work.notify

    def counting(n: int = 1) -> None:
        wakes.append(threading.current_thread().name)
        notify(n)

    store._work.notify = counting  # type: ignore[method-assign]
    manager.open_session("s", None)
    manager.close_session("s")
    assert wakes == []
    assert store.load_session("s") is not None and store.load_session("s").closed  # committed
    manager.close()


def test_a_waiter_is_released_by_the_commit_of_its_ticket_only(store):
    # Nothing commits while the test holds the commit lock.
    assert store._commit_lock.acquire(timeout=5)
    first = store.submit(session_op("a", 0, None, False), wake=False)
    errors: List[BaseException] = []

    def waiting(ticket: int) -> None:
        try:
            store.wait(ticket, timeout=10)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    w1 = threading.Thread(target=waiting, args=(first,))
    w2 = threading.Thread(target=waiting, args=(first + 1,))  # not even submitted yet
    w1.start()
    w2.start()
    assert _until(lambda: len(store._waiters) == 2)
    store._commit_lock.release()
    assert store.commit_here()  # commits the first ticket alone
    w1.join(5)
    assert not w1.is_alive()
    time.sleep(0.05)
    assert w2.is_alive() and len(store._waiters) == 1  # not woken by a commit of another ticket
    second = store.submit(session_op("b", 0, None, False))  # the writer is woken for it
    assert second == first + 1
    w2.join(5)
    assert not w2.is_alive() and errors == []
    assert store._waiters == []


def test_a_wait_that_times_out_leaves_nothing_behind(store):
    assert store._commit_lock.acquire(timeout=5)
    try:
        ticket = store.submit(session_op("a", 0, None, False), wake=False)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            store.wait(ticket, timeout=0.1)
        assert time.monotonic() - started < 5
        assert store._waiters == []
    finally:
        store._commit_lock.release()
    store.wait(ticket, timeout=5)  # committed here now


def test_the_stores_failure_releases_every_waiter(store):
    assert store._commit_lock.acquire(timeout=5)
    ticket = store.submit(session_op("a", 0, None, False), wake=False)
    raised: List[BaseException] = []

    def waiting() -> None:
        try:
            store.wait(ticket + 5, timeout=20)
        except BaseException as exc:  # noqa: BLE001 - reported below
            raised.append(exc)

    threads = [threading.Thread(target=waiting) for _ in range(3)]
    for t in threads:
        t.start()
    assert _until(lambda: len(store._waiters) == 3)
    store._fail(RuntimeError("disk on fire"))
    store._commit_lock.release()
    for t in threads:
        t.join(5)
        assert not t.is_alive()
    assert len(raised) == 3 and all(isinstance(e, StoreError) for e in raised)


def test_a_new_session_is_answered_before_its_commit_which_rides_in_the_next_one(store):
    # B03 is about parts: a session new to the store is answered at once (its write rides in
    # the next transaction, its first StartTurn's), a known session's change after its commit.
    manager = TurnManager(store, echo.EchoDriver(), agent_id="echo", bridge_id="b" * 32, commit_timeout=0.3)
    assert store._commit_lock.acquire(timeout=5)  # nothing commits meanwhile
    try:
        state = manager.open_session("s", None)  # would wait for the commit (TimeoutError)
        assert state["revision"] == 0
        assert store.load_session("s") is None  # not committed yet
        with pytest.raises(TimeoutError):
            manager.open_session("s", None)  # known now: its change is committed before the answer
    finally:
        store._commit_lock.release()
    manager._commit_timeout = 10.0
    manager.start_turn("s", "t1", "hi")  # its commit carries the session's write first
    assert store.load_session("s") is not None
    assert store.load_turn("t1") is not None
    manager.close()


def test_a_new_session_opened_and_never_used_is_committed_by_the_store_close(tmp_path):
    path = str(tmp_path / "c.sqlite3")
    st = Store(path)
    manager = TurnManager(st, echo.EchoDriver(), agent_id="echo", bridge_id="b" * 32)
    manager.open_session("lone", None)
    manager.close()
    st.close()
    again = Store(path)
    try:
        assert again.load_session("lone") == ("lone", 0, {"turns": 0}, False)
    finally:
        again.close()

"""The turn threads (bridge/turn_threads.py) and what a new turn's first commit promises, in
process: a thread whose turn ended runs the next turn (no thread start on the way to a first
part), StartTurn answers only once the turn-start is committed (B03, B05) also when the driver
emits nothing yet, and the cancel grace of one run never ends a later run in the same thread."""
from __future__ import annotations

import sqlite3
import threading
import time
from typing import Any, List

import pytest

from bridge_client.bridge import TurnContext
from bridge_client.bridge.store import Store, read_parts
from bridge_client.bridge.turn_threads import IDLE_NAME, TurnThreads
from bridge_client.bridge.turns import TurnManager
from bridge_client.drivers import echo

pytestmark = pytest.mark.timeout(60)


def _wait(predicate: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return bool(predicate())


# ---------------------------------------------------------------------------- TurnThreads


def test_b09_a_thread_whose_job_ended_runs_the_next_one():
    ran: List[Any] = []
    done = threading.Event()

    def run(job: Any) -> None:
        ran.append((job, threading.current_thread(), threading.current_thread().name))
        done.set()

    threads = TurnThreads(run, idle_seconds=5.0, max_idle=2)
    first = threads.start("a", "bridge-turn-a")
    assert done.wait(5)
    assert _wait(lambda: threads.idle == 1)
    assert first.name == IDLE_NAME
    done.clear()
    second = threads.start("b", "bridge-turn-b")
    assert done.wait(5)
    assert second is first, "the idle thread ran the second job"
    assert [(j, n) for j, _, n in ran] == [("a", "bridge-turn-a"), ("b", "bridge-turn-b")]
    threads.close()
    first.join(5)
    assert not first.is_alive()


def test_b09_idle_threads_are_bounded_in_number_and_time():
    gate = threading.Event()

    def run(job: Any) -> None:
        gate.wait(5)

    threads = TurnThreads(run, idle_seconds=0.2, max_idle=2)
    started = [threads.start(n, f"bridge-turn-{n}") for n in range(4)]
    assert len(set(started)) == 4, "busy threads are not shared"
    gate.set()
    assert _wait(lambda: sum(t.is_alive() for t in started) == 2), "beyond max_idle they end"
    assert _wait(lambda: not any(t.is_alive() for t in started)), "idle ones end after idle_seconds"
    assert threads.idle == 0


def test_b09_close_ends_idle_threads_at_once_and_a_busy_one_after_its_job(monkeypatch):
    failures: List[Any] = []
    monkeypatch.setattr(threading, "excepthook", failures.append)
    gate = threading.Event()
    threads = TurnThreads(lambda job: gate.wait(5) if job == "busy" else None, idle_seconds=30.0)
    idle = threads.start("quick", "bridge-turn-quick")
    assert _wait(lambda: threads.idle == 1)
    busy = threads.start("busy", "bridge-turn-busy")
    assert busy is idle  # the idle one took it
    other = threads.start("quick", "bridge-turn-quick2")
    assert _wait(lambda: threads.idle == 1)
    threads.close()
    other.join(5)
    assert not other.is_alive(), "an idle thread ends at close"
    assert busy.is_alive()
    gate.set()
    busy.join(5)
    assert not busy.is_alive(), "a busy thread ends once its job returns"
    late = threads.start("quick", "bridge-turn-late")  # after close: a new thread, not kept
    late.join(5)
    assert not late.is_alive()
    assert not failures, failures


def test_b09_a_reserved_thread_waits_for_its_job_past_the_idle_time(monkeypatch):
    failures: List[Any] = []
    monkeypatch.setattr(threading, "excepthook", failures.append)
    ran = threading.Event()
    threads = TurnThreads(lambda job: ran.set() if job == "late" else None, idle_seconds=0.1)
    threads.start("first", "bridge-turn-first")
    assert _wait(lambda: threads.idle == 1)
    worker = threads.reserve("bridge-turn-late")  # the idle thread, woken by nothing yet
    assert threads.idle == 0
    time.sleep(0.3)  # past idle_seconds: a reserved thread does not end
    assert worker.thread is not None and worker.thread.is_alive()
    threads.go(worker, "late")
    assert ran.wait(5)
    threads.close()
    worker.thread.join(5)
    assert not worker.thread.is_alive()
    assert not failures, failures


def test_b09_a_failed_thread_start_with_no_idle_thread_raises(monkeypatch):
    threads = TurnThreads(lambda job: None)

    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    with pytest.raises(RuntimeError):
        threads.start("a", "bridge-turn-a")


# ---------------------------------------------------------------------------- the manager


def test_b09_the_manager_runs_consecutive_turns_in_one_thread(tmp_path):
    store = Store(str(tmp_path / "t.sqlite3"))
    manager = TurnManager(store, echo.EchoDriver(), agent_id="echo", bridge_id="b" * 32)
    try:
        manager.open_session("s", None)
        seen = []
        for n in range(3):
            manager.start_turn("s", f"t{n}", "a b")
            turn = manager.find_turn("s", f"t{n}")
            turn.wait_for_parts(10**9, lambda: False)
            seen.append(turn.thread)
            assert _wait(lambda: manager.running == 0)
        assert seen[0] is seen[1] is seen[2]
    finally:
        manager.close()
        store.close()


class _Silent:
    """A driver that emits nothing until let go (a model that has not answered yet)."""

    agent_id = "echo"

    def __init__(self) -> None:
        self.go = threading.Event()

    def initial_state(self) -> Any:
        return None

    def run_turn(self, ctx: TurnContext) -> None:
        self.go.wait(10)


def test_b03_start_turn_answers_once_the_turn_start_is_committed_though_the_driver_emits_nothing(tmp_path):
    path = str(tmp_path / "c.sqlite3")
    store = Store(path)
    driver = _Silent()
    manager = TurnManager(store, driver, agent_id="echo", bridge_id="b" * 32)
    try:
        manager.open_session("s", None)
        began = time.monotonic()
        assert manager.start_turn("s", "t", "hi")["status"] == "started"
        assert time.monotonic() - began < 5.0, "the writer commits it without waiting for the driver"
        # Committed: another connection to the file sees the turn row and its turn-start.
        reader = sqlite3.connect(path)
        try:
            assert reader.execute("SELECT COUNT(*) FROM turns WHERE id='t'").fetchone() == (1,)
        finally:
            reader.close()
        assert [p.type for p in read_parts(path, "t")] == ["turn-start"]
        assert not driver.go.is_set()
    finally:
        driver.go.set()
        manager.close()
        store.close()


class _WaitOnWait:
    """Echoes a prompt at once, except ``wait``: that turn runs until it is cancelled."""

    agent_id = "echo"

    def initial_state(self) -> Any:
        return None

    def run_turn(self, ctx: TurnContext) -> None:
        ctx.start_step()
        if ctx.prompt == "wait":
            ctx.cancelled.wait(20)
        ctx.finish_step()


def test_c20_the_cancel_grace_of_one_run_never_ends_a_later_run_in_the_same_thread(tmp_path):
    store = Store(str(tmp_path / "g.sqlite3"))
    manager = TurnManager(store, _WaitOnWait(), agent_id="echo", bridge_id="b" * 32, cancel_grace=30.0)
    try:
        manager.open_session("s", None)
        manager.start_turn("s", "t", "quick")
        quick = manager.find_turn("s", "t")
        quick.wait_for_parts(10**9, lambda: False)
        assert _wait(lambda: manager.running == 0)
        manager.start_turn("s", "u", "wait")
        waiting = manager.find_turn("s", "u")
        assert waiting.thread is quick.thread, "the second turn runs in the first one's thread"
        # A grace that expires for the earlier run (its context) ends nothing now.
        manager._abandon(waiting, quick.ctx)
        assert not waiting.forced and waiting.status == "running"
        # Its own run's grace does.
        manager._abandon(waiting, waiting.ctx)
        assert waiting.forced
        waiting.wait_for_parts(10**9, lambda: False)
        assert [k for _, _, k in waiting.metas][-1] == "turn-finish"
    finally:
        manager.close()
        store.close()


class _Stubborn:
    """Echoes a prompt at once, except ``stuck``: that turn ignores its cancel until
    ``release`` is set (a driver blocked in a call that never looks at the event)."""

    agent_id = "echo"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.threads: List[threading.Thread] = []
        self.leaked: List[Any] = []

    def initial_state(self) -> Any:
        return None

    def run_turn(self, ctx: TurnContext) -> None:
        self.threads.append(threading.current_thread())
        local = _LOCAL.__dict__
        self.leaked.append(dict(local))
        _LOCAL.turn = ctx.turn_id  # a driver's own thread-local state
        ctx.start_step()
        ctx.text("x")
        if ctx.prompt == "stuck":
            self.release.wait(20)
            del _LOCAL.turn
            return
        del _LOCAL.turn
        ctx.finish_step()


_LOCAL = threading.local()


def test_c20_b09_an_abandoned_drivers_thread_runs_no_other_turn_until_its_driver_returns(tmp_path):
    store = Store(str(tmp_path / "a.sqlite3"))
    driver = _Stubborn()
    manager = TurnManager(store, driver, agent_id="echo", bridge_id="b" * 32, cancel_grace=0.2)
    try:
        manager.open_session("s", None)
        manager.start_turn("s", "t0", "quick")
        manager.find_turn("s", "t0").wait_for_parts(10**9, lambda: False)
        assert _wait(lambda: manager.running == 0 and manager._threads.idle == 1)
        manager.start_turn("s", "t1", "stuck")
        stuck = manager.find_turn("s", "t1")
        assert _wait(lambda: len(driver.threads) == 2)
        assert driver.threads[1] is driver.threads[0], "the stuck turn took the idle thread"
        manager.cancel_turn("s", "t1")
        assert _wait(lambda: stuck.forced and manager.running == 0), "the cancel grace ended it"
        # Its thread is still in the driver: the next turns get other threads, never it.
        for n in range(3):
            manager.start_turn("s", f"n{n}", "quick")
            manager.find_turn("s", f"n{n}").wait_for_parts(10**9, lambda: False)
            assert _wait(lambda: manager.running == 0)
        assert all(t is not driver.threads[1] for t in driver.threads[2:])
        assert len({id(t) for t in driver.threads[2:]}) == 1, "those turns share one fresh thread"
        # Once the abandoned driver returns, its thread is idle again and nothing of its turn
        # is written after the bridge's turn-finish.
        driver.release.set()
        assert _wait(lambda: manager._threads.idle == 2)
        kinds = [k for _, _, k in stuck.metas]
        assert kinds[-1] == "turn-finish" and kinds.count("turn-finish") == 1
        assert driver.leaked == [{}] * len(driver.leaked), "a driver's thread-local state stays its own"
    finally:
        driver.release.set()
        manager.close()
        store.close()


def test_b09_turns_beyond_max_running_are_overloaded_and_reserve_no_thread(tmp_path):
    from bridge_client.errors import Overloaded, TurnNotFound

    store = Store(str(tmp_path / "o.sqlite3"))
    driver = _Stubborn()
    manager = TurnManager(store, driver, agent_id="echo", bridge_id="b" * 32, max_running=2)
    try:
        manager.open_session("s", None)
        manager.start_turn("s", "a", "stuck")
        manager.start_turn("s", "b", "stuck")
        before = threading.active_count()
        for n in range(5):
            with pytest.raises(Overloaded):
                manager.start_turn("s", f"o{n}", "quick")
        assert threading.active_count() == before, "an Overloaded StartTurn started or kept a thread"
        with pytest.raises(TurnNotFound):  # an Overloaded turn is not written
            manager.find_turn("s", "o0")
        driver.release.set()
        assert _wait(lambda: manager.running == 0 and manager._threads.idle == 2)
        manager.start_turn("s", "c", "quick")
        manager.find_turn("s", "c").wait_for_parts(10**9, lambda: False)
        assert driver.threads[-1] in driver.threads[:2], "it runs in a pooled thread"
    finally:
        driver.release.set()
        manager.close()
        store.close()

"""B03: a new turn's start is committed by StartTurn's thread, with what the driver emitted by
then; while it is not committed the driver's parts (and the runner's own: step-finish, state,
turn-finish) neither wake the store's writer nor commit in the turn's thread, so no second
thread races StartTurn's for that commit. Nothing is left behind: what comes after StartTurn's
commit is committed (the writer is woken for it), a burst past the store's back-pressure bound
before the start's commit ends, and every part is in the log once, in order.

A turn manager in this process over a real store (SQLite, ``synchronous=FULL``).
"""
from __future__ import annotations

import threading
import time
from typing import Any, Dict, Iterator, List, Tuple

import pytest

from bridge_client.bridge.driver import TurnContext
from bridge_client.bridge.store import Store
from bridge_client.bridge.store import writer as store_writer
from bridge_client.bridge.turns import TurnManager
from bridge_client.drivers import echo

pytestmark = pytest.mark.timeout(60)


class _Burst:
    """Emits ``n`` text deltas at once in one step (``ctx.text`` each), then ``late`` more after
    ``release`` is set (when given)."""

    agent_id = "echo"

    def __init__(self, n: int, release: "threading.Event | None" = None, late: int = 0) -> None:
        self.n, self.release, self.late = n, release, late

    def run_turn(self, ctx: TurnContext) -> None:
        ctx.start_step()
        for i in range(self.n):
            ctx.text(f"{i} ")
        if self.release is not None:
            self.release.wait(10)
            for i in range(self.late):
                ctx.text(f"late{i} ")
        ctx.finish_step()


@pytest.fixture
def commits(monkeypatch) -> Iterator[List[Tuple[str, int]]]:
    """Each commit round as (thread name, items queued at its start)."""
    seen: List[Tuple[str, int]] = []
    round_ = store_writer.StoreWriter._round

    def recording(self: Any) -> bool:
        seen.append((threading.current_thread().name, len(self._queue)))
        return round_(self)

    monkeypatch.setattr(store_writer.StoreWriter, "_round", recording)
    yield seen


def _manager(tmp_path, driver: Any) -> Tuple[Store, TurnManager]:
    store = Store(str(tmp_path / "s.sqlite3"))
    manager = TurnManager(store, driver, agent_id="echo", bridge_id="b" * 32)
    manager.open_session("s", None)
    return store, manager


def _log(manager: TurnManager, turn_id: str) -> List[Dict[str, Any]]:
    import json

    turn = manager.find_turn("s", turn_id)
    turn.wait_for_parts(10**9, lambda: False)  # until complete
    with turn._cond:
        return [json.loads(t) for t in turn.texts]


def test_b03_a_turn_emitted_at_once_is_committed_whole_by_start_turns_thread(tmp_path, commits):
    store, manager = _manager(tmp_path, echo.EchoDriver())
    try:
        manager.start_turn("s", "t-warm", "warm")  # the turn threads and the store are warm
        _log(manager, "t-warm")
        del commits[:]
        caller = threading.current_thread().name
        for n in range(20):
            assert manager.start_turn("s", f"t-{n}", "one two")["status"] == "started"
            parts = _log(manager, f"t-{n}")
            assert [p["index"] for p in parts] == list(range(len(parts)))
            assert parts[-1]["type"] == "turn-finish"
        # Every turn's start is committed in StartTurn's thread (no writer woken to race it),
        # mostly with the whole turn; a turn thread the scheduler pauses past the join wait
        # leaves the rest to a second commit, never loses a part.
        mine = [c for c in commits if c[0] == caller]
        assert len(mine) >= 20 and len(commits) <= 40, commits
    finally:
        manager.close()
        store.close()


def test_b03_parts_after_start_turns_commit_are_committed_by_the_writer(tmp_path, commits):
    release = threading.Event()
    store, manager = _manager(tmp_path, _Burst(3, release, late=5))
    try:
        assert manager.start_turn("s", "t-late", "x")["status"] == "started"
        turn = manager.find_turn("s", "t-late")
        with turn._cond:
            first = len(turn.texts)
        assert first >= 1, "the answer came after the start's commit"
        release.set()
        parts = _log(manager, "t-late")
        texts = "".join(p.get("text", "") for p in parts)
        assert texts == "0 1 2 " + "".join(f"late{i} " for i in range(5))
        assert [p["index"] for p in parts] == list(range(len(parts)))
    finally:
        manager.close()
        store.close()


def test_b03_a_burst_past_back_pressure_before_the_start_is_committed_ends(tmp_path, monkeypatch):
    # The driver fills the store's queue before StartTurn's commit: it waits for room (the
    # GIL goes to StartTurn's thread, which commits), and the turn ends whole.
    monkeypatch.setattr(store_writer, "MAX_PENDING", 50)
    from bridge_client.bridge import turn_sink

    monkeypatch.setattr(turn_sink, "MAX_PENDING", 50)
    store, manager = _manager(tmp_path, _Burst(400))
    try:
        assert manager.start_turn("s", "t-burst", "x")["status"] == "started"
        parts = _log(manager, "t-burst")
        assert sum(p["type"] == "text-delta" for p in parts) == 400
        assert [p["index"] for p in parts] == list(range(len(parts)))
    finally:
        manager.close()
        store.close()


def test_b03_a_runner_part_queued_just_after_the_starts_commit_is_committed(tmp_path, monkeypatch):
    # The runner's own parts (here step-finish and turn-finish of a driver that fails at once)
    # may be queued right after StartTurn's thread committed the turn's start and found
    # nothing queued behind it: that part must still wake the writer. The append is held
    # until then (as a scheduler could hold the turn's thread).
    from bridge_client.bridge import turn_runner

    real = turn_runner.append_part

    def late(store: Any, turn: Any, kind: str, *args: Any, **kw: Any) -> Any:
        if kind in ("step-finish", "turn-finish") and turn.buffer is not None and not turn.buffer.committed:
            deadline = time.monotonic() + 5
            while not turn.buffer.committed and time.monotonic() < deadline:
                time.sleep(0.005)
            while store._commit_lock.locked() and time.monotonic() < deadline:
                time.sleep(0.005)
            time.sleep(0.05)  # StartTurn's thread has looked at the queue
        return real(store, turn, kind, *args, **kw)

    monkeypatch.setattr(turn_runner, "append_part", late)
    store, manager = _manager(tmp_path, echo.EchoDriver(steps=1, fail_at=0))
    try:
        assert manager.start_turn("s", "t", "a b")["status"] == "started"
        turn = manager.find_turn("s", "t")
        deadline = time.monotonic() + 5
        while not turn.complete and time.monotonic() < deadline:
            time.sleep(0.01)
        assert turn.complete, "turn-finish was left queued with no commit to come"
        kinds = [k for (_, _, k) in turn.metas]
        assert kinds[0] == "turn-start" and kinds[-1] == "turn-finish", kinds
    finally:
        manager.close()
        store.close()


def test_a_turn_committed_whole_at_once_is_one_insert_of_its_row(tmp_path):
    # Start, steps and finish in one transaction: the turn's checkpoint and finish updates are
    # folded into the insert of its row, which ends up as the updates would have left it.
    st = Store(str(tmp_path / "f.sqlite3"))
    statements: List[str] = []
    st._conn.set_trace_callback(statements.append)

    class _StateInStep:
        agent_id = "echo"

        def run_turn(self, ctx: TurnContext) -> None:
            ctx.start_step()
            ctx.text("a")
            ctx.set_state({"x": 1})  # inside the step: the step's checkpoint has it
            ctx.finish_step()

    manager = TurnManager(st, _StateInStep(), agent_id="echo", bridge_id="b" * 32)
    try:
        manager.open_session("s", None)
        manager.start_turn("s", "t", "a b")
        turn = manager.find_turn("s", "t")
        turn.wait_for_parts(10**9, lambda: False)
        row = st.load_turn("t")
        assert row is not None and row.status == "finished"
        assert row.finish == {"finishReason": "stop", "usage": None, "error": None}
        assert row.checkpoint == {"sessionId": "s", "revision": 1, "data": {"x": 1}}
        inserts = [s for s in statements if s.startswith("INSERT INTO turns")]
        updates = [s for s in statements if s.startswith("UPDATE turns")]
        assert len(inserts) == 1 and updates == [], statements
    finally:
        manager.close()
        st.close()

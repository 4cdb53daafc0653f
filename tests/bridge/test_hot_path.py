"""The bridge's hot path (issue 15): a lone part committed in the thread that emits it, the
readers poked in the committing thread, group commit when parts come faster (B03, C09)."""
from __future__ import annotations

import sqlite3
import threading

import pytest

from bridge_client.bridge.store import Store, read_parts
from bridge_client.bridge.turns import TurnManager
from bridge_client.drivers import echo

pytestmark = pytest.mark.timeout(60)


class _Reader:
    """A Reader (what a ReadTurn stream is to its turn) that checks, at each poke, that every
    part it can see is already in the store file, read by a connection of its own."""

    def __init__(self, turn, path) -> None:
        self.turn = turn
        self.path = path
        self.seen = 0
        self.threads = set()
        self.missing = []
        self.done = threading.Event()

    def poke(self) -> None:
        self.threads.add(threading.current_thread().name)
        with self.turn._cond:
            visible = len(self.turn.texts)
            complete = self.turn.complete
        stored = len(read_parts(self.path, self.turn.id))
        if stored < visible:
            self.missing.append((visible, stored))
        self.seen = visible
        if complete:
            self.done.set()


def _manager(tmp_path, driver):
    store = Store(str(tmp_path / "bridge.sqlite3"))
    manager = TurnManager(store, driver, agent_id="echo", bridge_id="b" * 16)
    manager.open_session("s", None)
    return store, manager


def test_b03_a_paced_part_is_stored_before_the_reader_that_its_own_thread_pokes(tmp_path):
    store, manager = _manager(tmp_path, echo.EchoDriver(delay=0.01, chunks=5))
    path = str(tmp_path / "bridge.sqlite3")
    try:
        manager.start_turn("s", "t", "hello world")
        turn = manager.find_turn("s", "t")
        reader = _Reader(turn, path)
        turn.add_reader(reader)
        assert reader.done.wait(30)
        turn.remove_reader(reader)
    finally:
        manager.close()
        store.close()
    assert reader.missing == []
    # Paced parts (10 ms apart) are committed by the turn's own thread, not handed to the writer.
    assert "bridge-turn-t" in reader.threads
    texts = [p.text for p in read_parts(path, "t") if p.type == "text-delta"]
    assert len(texts) == 5


def test_b03_a_fast_driver_still_goes_through_group_commit(tmp_path):
    # No delay: 20,000 deltas in batches; the segments hold many parts each (the writer took
    # what queued meanwhile), and every part is there, in order.
    store, manager = _manager(tmp_path, echo.EchoDriver(chunks=20_000))
    path = str(tmp_path / "bridge.sqlite3")
    try:
        manager.start_turn("s", "t", "x" * 20_000)
        turn = manager.find_turn("s", "t")
        turn.wait_for_parts(10**9, lambda: False)
    finally:
        manager.close()
        store.close()
    parts = read_parts(path, "t")
    assert [p.index for p in parts] == list(range(len(parts)))
    conn = sqlite3.connect(path)
    try:
        (segments,) = conn.execute("SELECT COUNT(*) FROM segments WHERE turn_id = 't'").fetchone()
    finally:
        conn.close()
    assert segments < len(parts) / 10


def test_b03_commit_here_gives_way_to_a_commit_under_way(tmp_path):
    store = Store(str(tmp_path / "bridge.sqlite3"))
    try:
        assert store.commit_here() is False  # nothing queued
        with store._commit_lock:  # a commit under way elsewhere
            ticket = store.submit()
            assert store.commit_here() is False
        store.wait(ticket, 10)  # the writer (or this wait, inline) committed it
    finally:
        store.close()
    assert store.commit_here() is False  # closed: never commits

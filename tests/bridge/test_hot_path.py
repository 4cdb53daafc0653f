"""The bridge's hot path: a lone part committed in the thread that emits it, the
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


class _CountingStore:
    """Wraps a Store: counts the parts committed inline (commit_here) and handed to the writer."""

    _writer_waiting = True  # so that every hand-off calls wake_writer (the sink skips it otherwise)

    def __init__(self, store) -> None:
        self.store = store
        self.paths = []

    def commit_here(self):
        self.paths.append("inline")
        return self.store.commit_here()

    def wake_writer(self):
        self.paths.append("writer")
        self.store.wake_writer()

    def __getattr__(self, name):
        return getattr(self.store, name)


def test_b03_a_paced_stream_that_falls_behind_commits_inline_again_after_two_parts(tmp_path, monkeypatch):
    # 5 ms apart, then one delta late (two at once), then 5 ms apart again: only the two
    # that came together (and the one right after them) go to the writer; before the
    # fix the next 50 ms of deltas did. A burst keeps going to the writer.
    from bridge_client.bridge import turn_sink
    from bridge_client.bridge.turn_log import Turn

    store = Store(str(tmp_path / "bridge.sqlite3"))
    clock = [100.0]
    monkeypatch.setattr(turn_sink, "_monotonic", lambda: clock[0])
    try:
        turn = Turn("t", "s", "p", None, "running")
        turn.buffer = store.buffer("t", turn, turn.append_lock, 0)
        counting = _CountingStore(store)
        sink = turn_sink.RunSink(turn, counting, None, None)
        append = sink.text_appender("text-delta", 0, 1)
        for at in (0.0, 0.005, 0.010, 0.0101, 0.015, 0.020, 0.025, 0.0251, 0.0252, 0.0253, 0.0254):
            clock[0] = 100.0 + at
            append("abcd")
        store.wait(turn.buffer.ticket(10), 10)
        assert len(turn.texts) == 11  # every part committed and published
    finally:
        store.close()
    assert counting.paths == [
        "inline", "inline", "inline", "writer", "writer", "inline", "inline",
        "writer", "writer", "writer", "writer",
    ]
    assert [p.index for p in read_parts(str(tmp_path / "bridge.sqlite3"), "t")] == list(range(11))


class _CheckingSink:
    """A SegmentSink that checks, when it is handed committed parts, that they are in the
    store file (read by a connection of its own): nothing is seen before its commit."""

    def __init__(self, path, turn_id) -> None:
        self.path = path
        self.turn_id = turn_id
        self.texts = []
        self.missing = []

    def publish_segment(self, texts, metas, marks):
        self.texts.extend(texts)
        stored = len(read_parts(self.path, self.turn_id))
        if stored < len(self.texts):
            self.missing.append((len(self.texts), stored))


def test_b03_parts_of_two_turns_that_queue_during_a_commit_share_the_next_transaction(tmp_path):
    # Group commit across streams, without a timer: what two turns add while a commit is
    # under way goes in one transaction (one COMMIT, one fsync) after it, and each turn's
    # readers see its parts only once that transaction is committed.
    path = str(tmp_path / "bridge.sqlite3")
    store = Store(path)
    commits = []
    store._conn.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)
    sinks = [_CheckingSink(path, "a"), _CheckingSink(path, "b")]
    locks = [threading.Lock(), threading.Lock()]
    buffers = [store.buffer(t, sink, lock) for t, sink, lock in zip("ab", sinks, locks)]
    try:
        with store._commit_lock:  # a commit under way elsewhere
            for i in range(3):
                for buffer, lock in zip(buffers, locks):
                    with lock:
                        buffer.add(i, '{"type":"text-delta","index":%d,"text":"x"}' % i, (0, 1, "text-delta"),
                                   (), False)
                    assert store.commit_here() is False  # gives way: the part stays queued
        store.wake_writer()
        for buffer in buffers:
            store.wait(buffer.ticket(2), 10)
    finally:
        store.close()
    assert len(commits) == 1
    assert [len(s.texts) for s in sinks] == [3, 3]
    assert [s.missing for s in sinks] == [[], []]

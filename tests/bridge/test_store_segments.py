"""The store's segment layout (one row per committed batch of a turn's parts): splitting by
offset, replay from any offset after a reload, the migration of the first layout (one row per
part) and the refusal of a newer schema (issue 5; B03, B05, C09)."""
from __future__ import annotations

import json
import os
import sqlite3
import threading

import pytest

from bridge_client.bridge.store import (
    SCHEMA_VERSION,
    Store,
    StoreError,
    part_text,
    read_parts,
    turn_op,
)
from bridge_client.bridge.turns import STEP_RESET_REASON, TurnManager
from bridge_client.drivers import echo
from bridge_harness import BridgeProcess, prepare_state, text_of

pytestmark = pytest.mark.timeout(60)

# The first layout, as bridges before schema version 2 wrote it (user_version 0).
_OLD_SCHEMA = """
CREATE TABLE sessions (id TEXT PRIMARY KEY, revision INTEGER NOT NULL, data TEXT NOT NULL,
    closed INTEGER NOT NULL DEFAULT 0);
CREATE TABLE turns (id TEXT PRIMARY KEY, session_id TEXT NOT NULL, prompt TEXT NOT NULL,
    status TEXT NOT NULL, started_at TEXT NOT NULL, turn_state TEXT NOT NULL, finish TEXT,
    checkpoint TEXT NOT NULL);
CREATE INDEX turns_by_session ON turns (session_id);
CREATE TABLE parts (turn_id TEXT NOT NULL, idx INTEGER NOT NULL, step INTEGER,
    attempt INTEGER NOT NULL, type TEXT NOT NULL, json TEXT NOT NULL,
    PRIMARY KEY (turn_id, idx)) WITHOUT ROWID;
"""


class _Log:
    """A SegmentSink that records what it is given."""

    def __init__(self) -> None:
        self.calls = []
        self.event = threading.Event()

    def publish_segment(self, texts, metas, marks):
        self.calls.append((list(texts), list(metas), list(marks)))
        self.event.set()


def _schema_version(path):
    conn = sqlite3.connect(path)
    try:
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        conn.close()
    return version, tables


def test_b03_c09_parts_added_together_are_one_segment_split_by_offset(tmp_path):
    path = str(tmp_path / "s.sqlite3")
    store = Store(path)
    checkpoint = {"sessionId": "s", "revision": 0, "data": None}
    store.wait(store.submit(turn_op("t", "s", "p", "now", {}, checkpoint)))
    sink, lock = _Log(), threading.Lock()
    buffer = store.buffer("t", sink, lock, 0)
    kinds = [("step-start", 0, 1, {}), ("text-delta", 0, 1, {"text": "a\nb"}), ("step-reset", 0, 1, {})]
    with lock:  # the writer cannot take the buffer before all three are in
        for index, (kind, step, attempt, fields) in enumerate(kinds):
            buffer.add(index, part_text(kind, index, step, attempt, fields), (step, attempt, kind))
    store.wait(buffer.ticket(2), 10)
    assert sink.calls == [
        (
            [part_text(k, i, s, a, f) for i, (k, s, a, f) in enumerate(kinds)],
            [(0, 1, "step-start"), (0, 1, "text-delta"), (0, 1, "step-reset")],
            [(0, 1, "step-reset")],
        )
    ]
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT first_idx, n_parts FROM segments WHERE turn_id = 't'").fetchall() == [(0, 3)]
    conn.close()
    parts = store.load_parts("t")
    assert [(p.index, p.step, p.attempt, p.type) for p in parts] == [
        (0, 0, 1, "step-start"),
        (1, 0, 1, "text-delta"),
        (2, 0, 1, "step-reset"),
    ]
    assert json.loads(parts[1].text)["text"] == "a\nb"  # an escaped newline does not split
    store.close()
    with pytest.raises(StoreError):
        with lock:
            buffer.add(3, part_text("text-delta", 3, 0, 1, {"text": "x"}), (0, 1, "text-delta"))


def test_c09_replay_from_every_offset_is_exact_after_a_reload(tmp_path):
    path = str(tmp_path / "m.sqlite3")
    store = Store(path)
    manager = TurnManager(store, echo.EchoDriver(steps=3, chunks=200), agent_id="echo", bridge_id="b" * 32)
    manager.open_session("s", None)
    manager.start_turn("s", "t", "x" * 400)
    live = manager.find_turn("s", "t")
    live.wait_for_parts(10**9, lambda: False)
    expected = list(live.texts)
    manager.close()
    store.close()
    assert [json.loads(t)["index"] for t in expected] == list(range(len(expected)))

    store = Store(path)  # a new bridge: the turn is read back from its segments
    manager = TurnManager(store, echo.EchoDriver(), agent_id="echo", bridge_id="b" * 32)
    turn = manager.find_turn("s", "t")
    assert turn.texts == expected and turn.complete
    for offset in range(len(expected) + 1):
        got, position = [], offset
        while True:
            texts, position, done = turn.take(position, max_values=7)
            got.extend(texts)
            if done:
                break
        assert got == expected[offset:], offset
    manager.close()
    store.close()


def _old_layout_file(tmp_path, sid, tid):
    """A bridge.sqlite3 of the first layout holding a turn cut inside step 1 (as a crash
    leaves it), made from a real run of the echo driver. Returns (path, kept part texts)."""
    scratch = str(tmp_path / "scratch.sqlite3")
    store = Store(scratch)
    manager = TurnManager(store, echo.EchoDriver(steps=2, chunks=3), agent_id="echo", bridge_id="b" * 32)
    manager.open_session(sid, None)
    manager.start_turn(sid, tid, "a b c")
    manager.find_turn(sid, tid).wait_for_parts(10**9, lambda: False)
    manager.close()
    store.close()
    parts = read_parts(scratch, tid)
    cut = next(p.index for p in parts if p.step == 1 and p.type == "tool-call")
    kept = parts[: cut + 1]
    conn = sqlite3.connect(scratch)
    session = conn.execute("SELECT id, revision, data, closed FROM sessions").fetchone()
    turn = conn.execute(
        "SELECT id, session_id, prompt, started_at, turn_state, checkpoint FROM turns"
    ).fetchone()
    conn.close()
    state = str(tmp_path / "state")
    prepare_state(state, agent_id="echo", options={"steps": 2, "chunks": 3})
    path = os.path.join(state, "bridge.sqlite3")
    conn = sqlite3.connect(path)
    conn.executescript(_OLD_SCHEMA)
    conn.execute("INSERT INTO sessions VALUES (?, ?, ?, ?)", session)
    conn.execute(
        "INSERT INTO turns (id, session_id, prompt, status, started_at, turn_state, finish, checkpoint) "
        "VALUES (?, ?, ?, 'running', ?, ?, NULL, ?)",
        turn,
    )
    conn.executemany(
        "INSERT INTO parts VALUES (?, ?, ?, ?, ?, ?)",
        [(tid, p.index, p.step, p.attempt, p.type, p.text) for p in kept],
    )
    conn.commit()
    conn.close()
    assert _schema_version(path) == (0, {"sessions", "turns", "parts"})
    return state, path, [p.text for p in kept]


def test_b05_a_store_of_the_first_layout_is_migrated_and_its_turn_continued(tmp_path, sid, tid):
    state, path, kept = _old_layout_file(tmp_path, sid, tid)
    bridge = BridgeProcess(state, str(tmp_path / "ws"), "echo").start()
    try:
        with bridge.connect() as c:
            assert c.start(sid, tid, "a b c") == "continued"
            parts, _, exit_ = c.read(sid, tid)
    finally:
        bridge.stop()
    assert exit_["_tag"] == "Success"
    tables = {"sessions", "turns", "segments", "meta", "approval_always", "turn_messages"}
    tables.add("session_interactive")
    tables.add("session_epochs")  # portable sessions: each session's epoch and move
    assert _schema_version(path) == (SCHEMA_VERSION, tables)
    stored = read_parts(path, tid)
    # The old rows are the log's first parts, unchanged (C09: offsets keep their meaning).
    assert [p.text for p in stored[: len(kept)]] == kept
    assert [p.index for p in stored] == list(range(len(stored)))
    reset = json.loads(stored[len(kept)].text)
    assert reset["type"] == "step-reset" and reset["step"] == 1 and reset["discardedAttempt"] == 1
    assert reset["reason"] == STEP_RESET_REASON
    # A reader gets the log without the discarded attempt (the step-reset itself is kept).
    assert parts == [
        json.loads(p.text) for p in stored if not (p.step, p.attempt) == (1, 1) or p.type == "step-reset"
    ]
    assert any(p["type"] == "step-start" and p["step"] == 1 and p["attempt"] == 2 for p in parts)
    assert parts[-1]["type"] == "turn-finish" and parts[-1]["finishReason"] == "stop"
    assert "a b c" in text_of(parts)


def test_a_store_of_a_newer_schema_is_refused_untouched(tmp_path):
    state = str(tmp_path / "state")
    prepare_state(state, agent_id="echo")
    path = os.path.join(state, "bridge.sqlite3")
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE future (x)")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="newer"):
        Store(path)
    bridge = BridgeProcess(state, str(tmp_path / "ws"), "echo").spawn()
    assert bridge.wait(10) == 2
    assert "newer" in bridge.log()
    assert _schema_version(path) == (SCHEMA_VERSION + 1, {"future"})

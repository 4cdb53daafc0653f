"""The store's file: its tables, schema versions and PRAGMAs, and opening and checking it (the
migration of the first layout, the refusal of a newer one, the generation and ``dirty`` mark in
``meta``)."""
from __future__ import annotations

import logging
import os
import sqlite3
import urllib.parse
import uuid
from typing import Tuple

from .records import StoreError
from .space import SLACK, StoreFull, checkpoint_room

__all__ = [
    "SCHEMA_VERSION",
    "SYNCHRONOUS",
    "connect",
    "open_schema",
    "open_meta",
    "open_read_only",
    "checkpoint_if_room",
]

log = logging.getLogger("bridge_client.bridge.store")  # one logger for the whole store

SCHEMA_VERSION = 2
"""The store's layout (``PRAGMA user_version``): 2 keeps a turn's parts by segments (one row per
committed batch). 0 is a new file or the first layout (one row per part), migrated on open."""

_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    revision INTEGER NOT NULL,
    data TEXT NOT NULL,
    closed INTEGER NOT NULL DEFAULT 0
)""",
    """CREATE TABLE IF NOT EXISTS turns (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    prompt TEXT NOT NULL,
    status TEXT NOT NULL,
    started_at TEXT NOT NULL,
    turn_state TEXT NOT NULL,
    finish TEXT,
    checkpoint TEXT NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS turns_by_session ON turns (session_id)",
    # One row per committed batch of a turn's parts: ``n_parts`` parts from index ``first_idx``,
    # their JSON texts joined by "\n". A rowid table: segments can be large.
    """CREATE TABLE IF NOT EXISTS segments (
    turn_id TEXT NOT NULL,
    first_idx INTEGER NOT NULL,
    n_parts INTEGER NOT NULL,
    parts TEXT NOT NULL
)""",
    "CREATE UNIQUE INDEX IF NOT EXISTS segments_by_turn ON segments (turn_id, first_idx)",
]

SYNCHRONOUS = "FULL"
"""The store's ``PRAGMA synchronous``: ``FULL`` fsyncs every commit (what a reader saw
survives a power loss); ``NORMAL`` does not (faster; a power loss may drop the last commits)."""

_META = "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"

# Interactive turns (made beside ``meta`` in any schema version: older bridges ignore them):
# the tools a session allowed always, how many user messages a turn's completed steps took, and
# each session's last approval settings (a turn continued after a restart keeps asking).
_INTERACTIVE = (
    "CREATE TABLE IF NOT EXISTS approval_always ("
    "session_id TEXT NOT NULL, tool_name TEXT NOT NULL, PRIMARY KEY (session_id, tool_name))",
    "CREATE TABLE IF NOT EXISTS turn_messages (turn_id TEXT PRIMARY KEY, taken INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS session_interactive ("
    "session_id TEXT PRIMARY KEY, approvals INTEGER NOT NULL, timeout REAL)",
    # A session's epoch (grows by one at each restore), the import that made it here, and
    # where it went when it was restored elsewhere (see bridge/store/portable.py).
    "CREATE TABLE IF NOT EXISTS session_epochs ("
    "session_id TEXT PRIMARY KEY, epoch INTEGER NOT NULL, import_id TEXT, moved_to TEXT)",
)


def connect(path: str, synchronous: str = SYNCHRONOUS) -> sqlite3.Connection:
    """Open (or create, mode 0600) the store file ``path`` in WAL mode with ``synchronous``.

    Raises:
        ValueError: ``synchronous`` is not ``FULL``, ``NORMAL`` or ``EXTRA``.
        sqlite3.Error / OSError: the file cannot be opened.
    """
    # Create the file 0600 first: it holds prompts and output, and SQLite gives its -wal and
    # -shm files the database file's mode.
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    # isolation_level=None: transactions are explicit (BEGIN/COMMIT in the writer).
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
    conn.execute("PRAGMA journal_mode=WAL")
    if synchronous not in ("FULL", "NORMAL", "EXTRA"):
        raise ValueError(f"synchronous must be FULL, NORMAL or EXTRA, not {synchronous!r}")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    return conn


def open_meta(conn: sqlite3.Connection, path: str) -> Tuple[str, bool]:
    """Read (or make) the file's generation and mark it dirty (open by a bridge), in one
    transaction (which writes nothing when the file has a generation and is marked already: a
    store left by a bridge that died, or by one whose disk filled), then checkpoint so that the
    main file holds both, when the checkpoint fits on the disk (:mod:`.space`): else the store
    serves with its ``-wal`` as it is (logged). Returns ``(generation, whether it was dirty
    already)``.

    Raises:
        StoreFull: the disk has no room for the mark (the text says how much is needed).
        sqlite3.Error: another failure.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(_META)
        for statement in _INTERACTIVE:
            conn.execute(statement)
        rows = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        generation = rows.get("generation")
        if not generation:
            generation = uuid.uuid4().hex
            conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('generation', ?)", (generation,))
        if rows.get("dirty") != "1":
            conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('dirty', '1')")
        conn.execute("COMMIT")
    except BaseException as exc:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass
        if isinstance(exc, sqlite3.Error) and _is_full(exc):
            room = checkpoint_room(conn, path)
            raise StoreFull(path, room.growth + SLACK, room.free, str(exc)) from exc
        raise
    checkpoint_if_room(conn, path, "at start")
    return str(generation), rows.get("dirty") == "1"


def checkpoint_if_room(conn: sqlite3.Connection, path: str, when: str) -> bool:
    """Checkpoint the store's ``-wal`` into its main file and empty it, when that fits on the
    disk; else leave both as they are (logged, with the space it needs). Returns True when it
    checkpointed.

    Raises:
        StoreFull: the checkpoint failed on a full disk although it seemed to fit.
    """
    room = checkpoint_room(conn, path)
    if not room.fits:
        log.warning(
            "store %s: not checkpointing its write-ahead log %s: that needs about %d KiB free, "
            "%d KiB are; serving with the -wal as it is (free some space under %s)",
            path,
            when,
            (room.growth + SLACK + 1023) // 1024,
            room.free // 1024,
            os.path.dirname(path) or ".",
        )
        return False
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except sqlite3.Error as exc:
        if _is_full(exc):
            raise StoreFull(path, room.growth + SLACK, room.free, str(exc)) from exc
        raise
    return True


def _is_full(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return (isinstance(code, int) and (code & 0xFF) == 13) or "disk is full" in str(exc).lower()


def open_schema(conn: sqlite3.Connection, path: str) -> None:
    """Create the tables, or migrate the first layout (a row per part) to segments, in one
    transaction; refuse a newer layout.

    Raises:
        StoreError: the file's schema version is newer than :data:`SCHEMA_VERSION`.
    """
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{path} has schema version {version}, newer than this bridge's {SCHEMA_VERSION}: "
            "it was written by a newer bridge_client; use that version, or another state directory"
        )
    if version == SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        for statement in _SCHEMA:
            conn.execute(statement)
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "parts" in tables:
            # The first layout: every part its own segment of one (the text kept as it is).
            moved = conn.execute(
                "INSERT INTO segments (turn_id, first_idx, n_parts, parts) "
                "SELECT turn_id, idx, 1, json FROM parts ORDER BY turn_id, idx"
            ).rowcount
            conn.execute("DROP TABLE parts")
            log.info("store %s: %d parts moved to segments (schema %d)", path, moved, SCHEMA_VERSION)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass
        raise


def open_read_only(path: str) -> sqlite3.Connection:
    """Open the store file ``path`` read-only (never creating it), for tools without a bridge.

    Raises:
        FileNotFoundError: no file at ``path``. sqlite3.Error: it cannot be opened.
    """
    if not os.path.exists(path):
        raise FileNotFoundError(path)
    uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"
    return sqlite3.connect(uri, uri=True, timeout=5.0)

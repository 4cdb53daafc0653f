"""The bridge's durable log (B03): sessions, turns and parts in SQLite, in the state directory.

Writes are data: each is an :class:`Op` (SQL, parameters, and for a part the sink that
publishes it). :meth:`Store.submit` queues ops; one writer thread takes everything queued,
runs it in one transaction, commits, and only then hands each committed part to its sink
(the turn's in-memory log, which wakes its readers). So every part is committed before any
reader sees it (B03), and ops submitted together land in the same transaction (a
``step-finish`` and its checkpoint, ``turn-finish`` and the turn's status).

Group commit instead of a commit per part: in WAL mode with ``synchronous=NORMAL`` a commit
does not fsync, and batching what queued up meanwhile keeps a fast driver's stream cheap.

Reads (:meth:`Store.load_session`, :meth:`Store.load_turn`, :meth:`Store.load_parts`) use a
second connection and see committed data only. :func:`summary` reads a store file without a
running bridge (``bridge-client bridges``).
"""
from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import urllib.parse
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Protocol, Sequence

__all__ = [
    "Store",
    "StoreError",
    "Op",
    "PartSink",
    "StoredSession",
    "StoredTurn",
    "StoredPart",
    "session_op",
    "turn_op",
    "part_op",
    "checkpoint_op",
    "finish_op",
    "json_text",
    "part_text",
    "summary",
]

log = logging.getLogger("bridge_client.bridge.store")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    revision INTEGER NOT NULL,
    data TEXT NOT NULL,
    closed INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS turns (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    prompt TEXT NOT NULL,
    status TEXT NOT NULL,
    started_at TEXT NOT NULL,
    turn_state TEXT NOT NULL,
    finish TEXT,
    checkpoint TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS turns_by_session ON turns (session_id);
CREATE TABLE IF NOT EXISTS parts (
    turn_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    step INTEGER,
    attempt INTEGER NOT NULL,
    type TEXT NOT NULL,
    json TEXT NOT NULL,
    PRIMARY KEY (turn_id, idx)
) WITHOUT ROWID;
"""

_MAX_QUEUED = 65536
"""Ops queued before :meth:`Store.submit` blocks (back-pressure on a driver faster than disk)."""


class StoreError(RuntimeError):
    """The store is closed, or a write failed (the bridge cannot keep B03 any more)."""


class StoredPart(NamedTuple):
    """A part as the log keeps it: its columns and its JSON text (sent as is, never re-encoded)."""

    index: int  # type: ignore[assignment]  # the part's offset; shadows tuple.index on purpose
    step: Optional[int]
    attempt: int
    type: str
    text: str


class StoredSession(NamedTuple):
    """A session row: ``data`` is the driver's JSON (decoded)."""

    session_id: str
    revision: int
    data: Any
    closed: bool


class StoredTurn(NamedTuple):
    """A turn row.

    Attributes:
        status: ``running`` (unfinished: running, or orphaned by a restart) or ``finished``.
        turn_state: the TurnState JSON object. finish: the ``turn-finish`` fields or ``None``.
        checkpoint: the SessionState JSON object as of the last completed step (B05).
    """

    turn_id: str
    session_id: str
    prompt: str
    status: str
    started_at: str
    turn_state: Dict[str, Any]
    finish: Optional[Dict[str, Any]]
    checkpoint: Dict[str, Any]


class PartSink(Protocol):
    """Receives parts once they are committed (the turn's log). Called from the writer thread;
    must not block on the store."""

    def publish(self, parts: List[StoredPart]) -> None:
        """Take committed parts, in log order."""
        ...


class Op(NamedTuple):
    """One queued write. ``sink``/``part`` are set for parts only."""

    sql: str
    params: Sequence[Any]
    sink: Optional[PartSink] = None
    part: Optional[StoredPart] = None


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
_encode_str = json.encoder.encode_basestring  # C-accelerated


def _utf8_checked(text: str) -> str:
    # A lone surrogate would pass json.dumps and then fail in SQLite or on the wire; refuse it
    # here, where the caller can be told (B08), rather than in the writer thread.
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("text holds a lone surrogate: it is not valid Unicode") from None
    return text


def json_text(value: Any) -> str:
    """Encode ``value`` as the compact JSON the store keeps (UTF-8 kept as is).

    Raises:
        TypeError: ``value`` holds something JSON cannot carry.
        ValueError: a float in it is NaN or infinite, or a string holds a lone surrogate.
    """
    return _utf8_checked(_ENCODER.encode(value))


def part_text(kind: str, index: int, step: Optional[int], attempt: int, fields: Dict[str, Any]) -> str:
    """Encode a part as ``{"type", "index", "step", "attempt", ...fields}`` JSON text.

    The hot path of a turn (a text delta is one string field) is formatted directly, without
    building a dict.

    Raises:
        TypeError / ValueError: as :func:`json_text`.
    """
    head = '{"type":"%s","index":%d,"step":%s,"attempt":%d' % (
        kind,
        index,
        "null" if step is None else "%d" % step,
        attempt,
    )
    if not fields:
        return head + "}"
    if len(fields) == 1:
        text = fields.get("text")
        if type(text) is str:
            return _utf8_checked(head + ',"text":' + _encode_str(text) + "}")
    return _utf8_checked(head + "," + _ENCODER.encode(fields)[1:])


_dumps = json_text


_SESSION_SQL = (
    "INSERT INTO sessions (id, revision, data, closed) VALUES (?, ?, ?, ?) "
    "ON CONFLICT(id) DO UPDATE SET revision = excluded.revision, data = excluded.data, "
    "closed = excluded.closed "
    "WHERE excluded.revision >= sessions.revision"
)
_TURN_SQL = (
    "INSERT INTO turns (id, session_id, prompt, status, started_at, turn_state, finish, checkpoint) "
    "VALUES (?, ?, ?, 'running', ?, ?, NULL, ?)"
)
_PART_SQL = "INSERT INTO parts (turn_id, idx, step, attempt, type, json) VALUES (?, ?, ?, ?, ?, ?)"
_CHECKPOINT_SQL = "UPDATE turns SET checkpoint = ? WHERE id = ?"
_FINISH_SQL = "UPDATE turns SET status = 'finished', finish = ? WHERE id = ?"


def session_op(session_id: str, revision: int, data: Any, closed: bool) -> Op:
    """Write a session. A revision lower than the stored one changes nothing (revisions only
    grow, B03). Raises TypeError/ValueError when ``data`` is not JSON."""
    return Op(_SESSION_SQL, (session_id, revision, _dumps(data), 1 if closed else 0))


def turn_op(
    turn_id: str, session_id: str, prompt: str, started_at: str, turn_state: Any, checkpoint: Any
) -> Op:
    """Insert a new turn, status ``running``; ``checkpoint`` is the SessionState JSON at its start."""
    return Op(_TURN_SQL, (turn_id, session_id, prompt, started_at, _dumps(turn_state), _dumps(checkpoint)))


_new_tuple = tuple.__new__  # builds a NamedTuple without its __new__ wrapper (hot path)


def part_op(sink: Optional[PartSink], turn_id: str, part: StoredPart) -> Op:
    """Append a part; ``sink.publish`` gets it after the commit."""
    params = (turn_id, part.index, part.step, part.attempt, part.type, part.text)
    return _new_tuple(Op, (_PART_SQL, params, sink, part))


def checkpoint_op(turn_id: str, checkpoint: Any) -> Op:
    """Record the session state (JSON object) as of the turn's last completed step (B05)."""
    return Op(_CHECKPOINT_SQL, (_dumps(checkpoint), turn_id))


def finish_op(turn_id: str, finish: Any) -> Op:
    """Mark a turn finished, with its ``turn-finish`` fields (JSON object)."""
    return Op(_FINISH_SQL, (_dumps(finish), turn_id))


def _connect(path: str) -> sqlite3.Connection:
    # Create the file 0600 first: it holds prompts and output, and SQLite gives its -wal and
    # -shm files the database file's mode.
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    # isolation_level=None: transactions are explicit (BEGIN/COMMIT in the writer).
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


_ROWS_PER_INSERT = 128
"""Parts per multi-row INSERT: 768 parameters, under the 999 of SQLite before 3.32."""

_part_inserts: Dict[int, str] = {}


def _insert_parts(conn: sqlite3.Connection, batch: List[Op], i: int, j: int) -> None:
    """Insert the parts ``batch[i:j]`` with multi-row INSERTs of 128, 64, ... 1 rows.

    ``executemany`` releases and retakes the GIL around every row; while a driver thread
    keeps the GIL busy, each retake waits, and the writer fell far behind the driver (a
    quarter of its speed alone). One statement per 128 rows retakes it once per 128.
    """
    while i < j:
        rows = min(_ROWS_PER_INSERT, j - i)
        rows = 1 << (rows.bit_length() - 1)  # a power of two: at most 8 statements cached
        sql = _part_inserts.get(rows)
        if sql is None:
            sql = _part_inserts[rows] = _PART_SQL + ", (?, ?, ?, ?, ?, ?)" * (rows - 1)
        params: List[Any] = []
        for op in batch[i : i + rows]:
            params.extend(op.params)
        conn.execute(sql, params)
        i += rows


class Store:
    """The SQLite store of one bridge (B03).

    Args:
        path: the database file (``<state>/bridge.sqlite3``); created when missing.
        on_fatal: called once, from the writer thread, when a write fails; the store refuses
            every later write with :class:`StoreError`. ``None``: only log it.

    Threads: :meth:`submit` and the ``load_*`` methods may be called from any thread. One
    writer thread (``bridge-store-writer``) runs the writes; :meth:`close` joins it.
    """

    def __init__(self, path: str, on_fatal: Optional[Callable[[BaseException], None]] = None) -> None:
        self.path = path
        self._on_fatal = on_fatal
        self._conn = _connect(path)
        self._conn.executescript(_SCHEMA)
        self._reader = _connect(path)
        self._read_lock = threading.Lock()
        # One lock, three conditions: work for the writer, room for submitters, done for waiters.
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._room = threading.Condition(self._lock)
        self._done = threading.Condition(self._lock)
        self._queue: List[Op] = []
        self._submitted = 0  # ops ever queued; a ticket is this count after its ops
        self._committed = 0  # ops ever committed (FIFO, so ticket t is durable once this >= t)
        self._closing = False
        self._writer_waiting = False  # skip notify() while the writer is busy (hot path)
        self._failed: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, name="bridge-store-writer", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ writes

    def submit(self, *ops: Op) -> int:
        """Queue ``ops``; they are committed together, in order, after everything queued before.

        Blocks (back-pressure) while too many ops wait for the writer.

        Returns:
            A ticket for :meth:`wait`.

        Raises:
            StoreError: the store is closed or a write failed.
        """
        with self._lock:
            while len(self._queue) >= _MAX_QUEUED and not self._closing and self._failed is None:
                self._room.wait()
            if self._failed is not None:
                raise StoreError(f"the store failed: {self._failed}")
            if self._closing:
                raise StoreError("the store is closed")
            self._queue.extend(ops)
            self._submitted += len(ops)
            if self._writer_waiting:
                self._work.notify()
            return self._submitted

    def wait(self, ticket: int, timeout: Optional[float] = 30.0) -> None:
        """Block until the ops of ``ticket`` are committed.

        Args:
            ticket: what :meth:`submit` returned.
            timeout: in seconds; ``None`` waits as long as it takes.

        Raises:
            StoreError: a write failed. TimeoutError: not committed within ``timeout``.
        """
        with self._lock:
            ok = self._done.wait_for(lambda: self._committed >= ticket or self._failed is not None, timeout)
            if self._failed is not None:
                raise StoreError(f"the store failed: {self._failed}")
            if not ok:
                raise TimeoutError(f"the store did not commit within {timeout} s")

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._closing:
                    self._writer_waiting = True
                    self._work.wait()
                    self._writer_waiting = False
                if not self._queue:
                    return
                batch, self._queue = self._queue, []
                self._room.notify_all()
            try:
                self._write(batch)
            except BaseException as exc:  # noqa: BLE001 - any failure ends durability
                self._fail(exc)
                return
            self._publish(batch)
            with self._lock:
                self._committed += len(batch)
                self._done.notify_all()

    def _write(self, batch: List[Op]) -> None:
        conn = self._conn
        conn.execute("BEGIN")
        try:
            i, n = 0, len(batch)
            while i < n:
                # Runs of the same statement (parts, mostly) go through one executemany.
                sql = batch[i].sql
                j = i + 1
                while j < n and batch[j].sql is sql:
                    j += 1
                if j - i == 1:
                    conn.execute(sql, batch[i].params)
                elif sql is _PART_SQL:
                    _insert_parts(conn, batch, i, j)
                else:
                    conn.executemany(sql, [op.params for op in batch[i:j]])
                i = j
            conn.execute("COMMIT")
        except BaseException:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            raise

    def _publish(self, batch: List[Op]) -> None:
        groups: Dict[int, List[StoredPart]] = {}
        sinks: Dict[int, PartSink] = {}
        for op in batch:
            if op.sink is not None and op.part is not None:
                key = id(op.sink)
                sinks[key] = op.sink
                groups.setdefault(key, []).append(op.part)
        for key, parts in groups.items():
            try:
                sinks[key].publish(parts)
            except Exception:  # a sink bug must not stop the writer
                log.exception("publishing committed parts failed")

    def _fail(self, exc: BaseException) -> None:
        log.critical(
            "store write failed; parts can no longer be made durable: %s: %s", type(exc).__name__, exc
        )
        with self._lock:
            self._failed = exc
            self._room.notify_all()
            self._done.notify_all()
        if self._on_fatal is not None:
            try:
                self._on_fatal(exc)
            except Exception:
                log.exception("on_fatal failed")

    def close(self, timeout: float = 10.0) -> None:
        """Commit what is queued, stop the writer and close both connections. Idempotent.

        Args:
            timeout: in seconds, how long to wait for the writer to drain.
        """
        with self._lock:
            if self._closing:
                return
            self._closing = True
            self._work.notify_all()
            self._room.notify_all()
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.error("store writer did not finish within %s s", timeout)
            return
        with self._read_lock:
            self._reader.close()
        self._conn.close()

    # ------------------------------------------------------------------ reads

    def _query(self, sql: str, params: Sequence[Any]) -> List[Any]:
        with self._read_lock:
            return self._reader.execute(sql, params).fetchall()

    def load_session(self, session_id: str) -> Optional[StoredSession]:
        """Return the committed session ``session_id``, or ``None``."""
        rows = self._query("SELECT id, revision, data, closed FROM sessions WHERE id = ?", (session_id,))
        if not rows:
            return None
        sid, revision, data, closed = rows[0]
        return StoredSession(sid, revision, json.loads(data), bool(closed))

    def load_turn(self, turn_id: str) -> Optional[StoredTurn]:
        """Return the committed turn ``turn_id`` (of any session), or ``None``."""
        rows = self._query(
            "SELECT id, session_id, prompt, status, started_at, turn_state, finish, checkpoint "
            "FROM turns WHERE id = ?",
            (turn_id,),
        )
        if not rows:
            return None
        tid, sid, prompt, status, started_at, turn_state, finish, checkpoint = rows[0]
        return StoredTurn(
            tid,
            sid,
            prompt,
            status,
            started_at,
            json.loads(turn_state),
            json.loads(finish) if finish is not None else None,
            json.loads(checkpoint),
        )

    def load_parts(self, turn_id: str) -> List[StoredPart]:
        """Return every committed part of ``turn_id``, in index order."""
        rows = self._query(
            "SELECT idx, step, attempt, type, json FROM parts WHERE turn_id = ? ORDER BY idx", (turn_id,)
        )
        return [StoredPart(*row) for row in rows]

    def counts(self) -> Dict[str, int]:
        """Return ``{"sessions": n, "turns": n, "running": n}`` of what is committed."""
        with self._read_lock:
            return _counts(self._reader)


def _counts(conn: sqlite3.Connection) -> Dict[str, int]:
    (sessions,) = conn.execute("SELECT COUNT(*) FROM sessions").fetchone()
    turns, running = conn.execute(
        "SELECT COUNT(*), COALESCE(SUM(status = 'running'), 0) FROM turns"
    ).fetchone()
    return {"sessions": int(sessions), "turns": int(turns), "running": int(running)}


def summary(path: str) -> Dict[str, int]:
    """Count what a bridge's store holds, without a running bridge and without writing to it.

    ``running`` counts unfinished turns (running now, or left unfinished by a bridge that
    died; the next ``StartTurn`` continues those, B05).

    Args:
        path: a ``bridge.sqlite3`` file.

    Returns:
        ``{"sessions": n, "turns": n, "running": n}``; all zero for a store with no tables yet.

    Raises:
        FileNotFoundError: no file at ``path``.
        sqlite3.Error: the file is not a readable SQLite database.
    """
    if not os.path.exists(path):
        raise FileNotFoundError(path)
    uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=5.0)
    try:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not {"sessions", "turns"} <= tables:
            return {"sessions": 0, "turns": 0, "running": 0}
        return _counts(conn)
    finally:
        conn.close()

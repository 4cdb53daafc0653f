"""The bridge's durable log: sessions, turns and parts in SQLite, in the state directory.

Writes are data: each is an :class:`Op` (SQL and parameters), or a part added to a turn's
:class:`PartBuffer`. One writer thread takes everything queued, runs it in one transaction,
commits, and only then hands the committed parts to their sink (the turn's in-memory log,
which wakes its readers). So every part is committed before any reader sees it, and
what is queued together lands in the same transaction (a ``step-finish`` and its checkpoint,
``turn-finish`` and the turn's status).

The log is kept by *segments*: one row per turn per committed batch, holding the parts'
JSON texts joined by newlines (compact JSON has none), instead of a row per part. A fast
driver's parts cost the writer a ``join`` and one row; readers and replay split segments by
offset (:meth:`Store.load_parts`). Parts reach the writer without the store's lock:
:meth:`PartBuffer.add` appends to the turn's own buffer (under the turn's lock, which orders
its parts) and queues the buffer once until the writer drains it.

Group commit instead of a commit per part: batching what queued up meanwhile keeps a fast
driver's stream cheap. The store runs with ``synchronous=FULL`` (WAL mode): every commit is
fsynced before its parts reach a reader, so what a reader saw survives a power loss (the cost
per part is measured in ``benchmarks``, see :doc:`resilience`); ``NORMAL`` may be chosen.

Each store file has a *generation* (a random id in its ``meta`` table, new with the file),
carried in ``Hello`` and every turn state, and a ``dirty`` mark, set while a bridge has
it open and cleared by :meth:`Store.close`: a dirty file without its ``-wal`` lost writes
(see :mod:`bridge_client.bridge.recovery`).

Schema versions (``PRAGMA user_version``): 0 is a new file, or the first layout (a ``parts``
table, one row per part), which :class:`Store` migrates in one transaction when it opens it;
2 is the segment layout. A file of a newer version is refused (:class:`StoreError`).

Reads (:meth:`Store.load_session`, :meth:`Store.load_turn`, :meth:`Store.load_parts`) use a
second connection and see committed data only. :func:`summary` reads a store file without a
running bridge (``bridge-client bridges``).
"""
from __future__ import annotations

import json
import logging
import os
import re
import sqlite3
import threading
import urllib.parse
import uuid
from collections import deque
from typing import Any, Callable, Deque, Dict, List, NamedTuple, Optional, Protocol, Sequence, Tuple, Union

__all__ = [
    "Store",
    "StoreError",
    "Op",
    "PartSink",
    "SegmentSink",
    "PartBuffer",
    "PartTicket",
    "Meta",
    "StoredSession",
    "StoredTurn",
    "StoredPart",
    "SCHEMA_VERSION",
    "MAX_PENDING",
    "Ticket",
    "session_op",
    "turn_op",
    "part_op",
    "checkpoint_op",
    "finish_op",
    "allow_always_op",
    "messages_taken_op",
    "json_text",
    "part_text",
    "text_parts",
    "summary",
    "read_parts",
    "SYNCHRONOUS",
]

log = logging.getLogger("bridge_client.bridge.store")

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
# the tools a session allowed always, and how many user messages a turn's completed steps took.
_INTERACTIVE = (
    "CREATE TABLE IF NOT EXISTS approval_always ("
    "session_id TEXT NOT NULL, tool_name TEXT NOT NULL, PRIMARY KEY (session_id, tool_name))",
    "CREATE TABLE IF NOT EXISTS turn_messages (turn_id TEXT PRIMARY KEY, taken INTEGER NOT NULL)",
)

MAX_PENDING = 65536
"""Parts (or ops) waiting for the writer before an appender blocks (back-pressure on a driver
faster than the disk)."""

Meta = Tuple[Optional[int], int, str]
"""A part's ``(step, attempt, type)``."""


class StoreError(RuntimeError):
    """The store is closed, a write failed (the bridge can no longer store every part before a
    reader sees it), or the file
    is of a layout this bridge does not know."""


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
        checkpoint: the SessionState JSON object as of the last completed step (where a
            restart continues from).
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
    """Receives parts submitted with :func:`part_op` once they are committed. Called from the
    writer thread; must not block on the store."""

    def publish(self, parts: List[StoredPart]) -> None:
        """Take committed parts, in log order."""
        ...


class SegmentSink(Protocol):
    """Receives the parts of a :class:`PartBuffer` once they are committed (the turn's log).
    Called from the writer thread; must not block on the store."""

    def publish_segment(self, texts: List[str], metas: List[Meta], marks: List[Meta]) -> None:
        """Take committed parts, in log order.

        Args:
            texts: their JSON texts. metas: their ``(step, attempt, type)``, one per text.
            marks: the metas of those that change how the log reads (``step-reset``,
                ``turn-finish``), in order; usually empty.
        """
        ...


class Op(NamedTuple):
    """One queued write. ``sink``/``part`` are set for a part written with :func:`part_op`."""

    sql: str
    params: Sequence[Any]
    sink: Optional[PartSink] = None
    part: Optional[StoredPart] = None


class PartTicket(NamedTuple):
    """What :meth:`Store.wait` waits for: the part at ``index`` of ``buffer`` committed."""

    buffer: "PartBuffer"
    index: int  # type: ignore[assignment]  # shadows tuple.index on purpose


Ticket = Union[int, PartTicket]

_MARK_KINDS = frozenset(("step-reset", "turn-finish"))


class PartBuffer:
    """The append side of one turn's log: parts (and the ops that go with them) waiting for
    the store's writer, which takes them all at once, as one segment row.

    Args:
        store: the store that writes them.
        turn_id: the turn.
        sink: gets the parts once committed (:class:`SegmentSink`).
        lock: the lock that orders the turn's appends (the caller's; the writer takes it
            briefly to take the buffer).
        next_index: the index of the next part (the number of parts already in the log).

    Hold ``lock`` to call :meth:`add`.
    """

    __slots__ = ("store", "turn_id", "sink", "lock", "first", "texts", "metas", "marks", "ops", "queued",
                 "committed")

    def __init__(
        self, store: "Store", turn_id: str, sink: SegmentSink, lock: threading.Lock, next_index: int = 0
    ) -> None:
        self.store = store
        self.turn_id = turn_id
        self.sink = sink
        self.lock = lock
        self.first = next_index  # the index of texts[0]
        self.texts: List[str] = []
        self.metas: List[Meta] = []
        self.marks: List[Meta] = []
        self.ops: List[Op] = []
        self.queued = False
        self.committed = next_index  # parts before this index are committed

    def add(self, index: int, text: str, meta: Meta, ops: Sequence[Op] = (), wake: bool = True) -> int:
        """Append the part ``index`` (the next one) with its JSON ``text`` and ``meta``, and
        ``ops`` to run in the same transaction. The caller holds ``lock``.

        ``wake=False``: the caller commits it itself (:meth:`Store.commit_here`, after
        releasing ``lock``) or wakes the writer (:meth:`Store.wake_writer`).

        Returns:
            How many parts wait in the buffer now (call :meth:`Store.wait_room` after
            releasing ``lock`` when it reaches the store's bound).

        Raises:
            StoreError: the store is closed or failed (nothing is added).
        """
        store = self.store
        if store._broken:
            store._raise_broken()
        texts = self.texts
        if not texts:
            self.first = index
        texts.append(text)
        self.metas.append(meta)
        if meta[2] in _MARK_KINDS:
            self.marks.append(meta)
        if ops:
            self.ops.extend(ops)
        if not self.queued:
            self.queued = True
            store._enqueue(self, wake)
        return len(texts)

    def add_many(self, index: int, texts: List[str], metas: List[Meta], wake: bool = True) -> int:
        """Like :meth:`add` for several parts (indexes ``index`` on), none of them a mark."""
        store = self.store
        if store._broken:
            store._raise_broken()
        if not self.texts:
            self.first = index
        self.texts.extend(texts)
        self.metas.extend(metas)
        if not self.queued:
            self.queued = True
            store._enqueue(self, wake)
        return len(self.texts)

    def ticket(self, index: int) -> PartTicket:
        """Return the ticket of part ``index`` for :meth:`Store.wait`."""
        return PartTicket(self, index)

    def _take(self) -> Tuple[int, List[str], List[Meta], List[Meta], List[Op]]:
        with self.lock:
            taken = (self.first, self.texts, self.metas, self.marks, self.ops)
            self.first += len(self.texts)
            self.texts, self.metas, self.marks, self.ops = [], [], [], []
            self.queued = False
            return taken


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


def text_parts(kind: str, first: int, step: Optional[int], attempt: int, texts: Sequence[str]) -> List[str]:
    """Encode consecutive one-text parts (``text-delta``, ``reasoning-delta``) with indexes from
    ``first``: the same strings as ``part_text(kind, first + i, step, attempt, {"text": t})``.

    Raises:
        TypeError: a text is not a str. ValueError: a text holds a lone surrogate.
    """
    head = '{"type":"%s","index":' % kind
    tail = ',"step":%s,"attempt":%d,"text":' % ("null" if step is None else "%d" % step, attempt)
    out: List[str] = []
    append = out.append
    index = first
    for t in texts:
        if type(t) is not str:
            raise TypeError(f"a text must be a str, got {type(t).__name__}")
        append(head + str(index) + tail + _encode_str(t) + "}")
        if not t.isascii():
            _utf8_checked(t)
        index += 1
    return out


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
_PART_SQL = "-- part"  # a marker: parts are written as segments (_SEGMENT_SQL)
_SEGMENT_SQL = "INSERT INTO segments (turn_id, first_idx, n_parts, parts) VALUES (?, ?, ?, ?)"
_CHECKPOINT_SQL = "UPDATE turns SET checkpoint = ? WHERE id = ?"
_FINISH_SQL = "UPDATE turns SET status = 'finished', finish = ? WHERE id = ?"


def session_op(session_id: str, revision: int, data: Any, closed: bool) -> Op:
    """Write a session. A revision lower than the stored one changes nothing (revisions only
    grow). Raises TypeError/ValueError when ``data`` is not JSON."""
    return Op(_SESSION_SQL, (session_id, revision, _dumps(data), 1 if closed else 0))


def turn_op(
    turn_id: str, session_id: str, prompt: str, started_at: str, turn_state: Any, checkpoint: Any
) -> Op:
    """Insert a new turn, status ``running``; ``checkpoint`` is the SessionState JSON at its start."""
    return Op(_TURN_SQL, (turn_id, session_id, prompt, started_at, _dumps(turn_state), _dumps(checkpoint)))


def part_op(sink: Optional[PartSink], turn_id: str, part: StoredPart) -> Op:
    """Append one part, on its own (a turn's parts go through its :class:`PartBuffer`);
    ``sink.publish`` gets it after the commit. Parts of one :meth:`Store.submit` with
    consecutive indexes of one turn become one segment.

    Raises:
        ValueError: ``part.text`` holds a newline (part JSON is compact).
    """
    if "\n" in part.text:
        raise ValueError("part JSON must be compact (no newline)")
    return Op(_PART_SQL, (turn_id,), sink, part)


def checkpoint_op(turn_id: str, checkpoint: Any) -> Op:
    """Record the session state (JSON object) as of the turn's last completed step."""
    return Op(_CHECKPOINT_SQL, (_dumps(checkpoint), turn_id))


def finish_op(turn_id: str, finish: Any) -> Op:
    """Mark a turn finished, with its ``turn-finish`` fields (JSON object)."""
    return Op(_FINISH_SQL, (_dumps(finish), turn_id))


def allow_always_op(session_id: str, tool_name: str) -> Op:
    """Remember that session ``session_id`` allowed ``tool_name`` always."""
    return Op(
        "INSERT OR IGNORE INTO approval_always (session_id, tool_name) VALUES (?, ?)", (session_id, tool_name)
    )


def messages_taken_op(turn_id: str, taken: int) -> Op:
    """Record how many user messages the turn's completed steps took (written with a
    ``step-finish``: a step run again after a restart is handed the rest again)."""
    return Op(
        "INSERT INTO turn_messages (turn_id, taken) VALUES (?, ?) "
        "ON CONFLICT(turn_id) DO UPDATE SET taken = excluded.taken",
        (turn_id, taken),
    )


def _connect(path: str, synchronous: str = SYNCHRONOUS) -> sqlite3.Connection:
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


def _open_meta(conn: sqlite3.Connection) -> Tuple[str, bool]:
    """Read (or make) the file's generation and mark it dirty (open by a bridge), in one
    transaction, then checkpoint so that the main file holds both. Returns
    ``(generation, whether it was dirty already)``."""
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
        conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('dirty', '1')")
        conn.execute("COMMIT")
    except BaseException:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass
        raise
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return str(generation), rows.get("dirty") == "1"


def _open_schema(conn: sqlite3.Connection, path: str) -> None:
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


_HEAD = re.compile(r'\{"type":"([^"\\]*)","index":\d+,"step":(null|\d+),"attempt":(\d+)')


def _stored_part(index: int, text: str) -> StoredPart:
    """Rebuild a part's columns from its JSON text (which :func:`part_text` starts with
    ``type``, ``index``, ``step``, ``attempt``)."""
    m = _HEAD.match(text)
    if m is not None:
        kind, step, attempt = m.groups()
        return StoredPart(index, None if step == "null" else int(step), int(attempt), kind, text)
    value = json.loads(text)
    step_value = value.get("step")
    return StoredPart(index, step_value, int(value.get("attempt", 1)), str(value.get("type")), text)


class Store:
    """The SQLite store of one bridge: every part is committed before any reader sees it.

    Args:
        path: the database file (``<state>/bridge.sqlite3``); created when missing, migrated
            when of the first layout.
        on_fatal: called once, from the writer thread, when a write fails; the store refuses
            every later write with :class:`StoreError`. ``None``: only log it.
        synchronous: ``FULL`` (default, :data:`SYNCHRONOUS`) or ``NORMAL``.

    Attributes:
        generation: the file's generation id (32 hex digits; new with a new file).
        was_dirty: the file was marked open by a bridge that did not close it (it died).

    Raises:
        StoreError: the file is of a newer schema version. sqlite3.Error / OSError: it cannot
            be opened.

    Threads: :meth:`submit`, :meth:`wait` and the ``load_*`` methods may be called from any
    thread; :meth:`PartBuffer.add` from the thread that holds the buffer's lock. One writer
    thread (``bridge-store-writer``) runs the writes; :meth:`close` joins it.
    """

    def __init__(
        self,
        path: str,
        on_fatal: Optional[Callable[[BaseException], None]] = None,
        synchronous: str = SYNCHRONOUS,
    ) -> None:
        self.path = path
        self.synchronous = synchronous
        self._on_fatal = on_fatal
        self._conn = _connect(path, synchronous)
        try:
            _open_schema(self._conn, path)
            self.generation, self.was_dirty = _open_meta(self._conn)
            self._reader = _connect(path, synchronous)
        except BaseException:
            self._conn.close()
            raise
        self._read_lock = threading.Lock()
        # One lock, three conditions: work for the writer, room for submitters, done for waiters.
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._room = threading.Condition(self._lock)
        self._done = threading.Condition(self._lock)
        # Items for the writer: PartBuffers (appended without the lock: deque.append is atomic)
        # and (ops, ticket) pairs (appended under the lock, so tickets are in queue order).
        self._queue: Deque[Any] = deque()
        self._submitted = 0  # ticketed submits ever queued; a ticket is this count after its ops
        self._committed = 0  # the highest ticket committed (FIFO: every lower one is committed too)
        self._closing = False
        self._broken = False  # closing or failed: read without the lock on the append path
        self._writer_waiting = False  # set (under the lock) only while the writer sleeps
        # Held by whoever runs a transaction: the writer thread, or a thread that commits
        # what it queued itself (commit_here) when no commit is under way.
        self._commit_lock = threading.Lock()
        self._failed: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, name="bridge-store-writer", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ writes

    def buffer(
        self, turn_id: str, sink: SegmentSink, lock: threading.Lock, next_index: int = 0
    ) -> PartBuffer:
        """Return a new :class:`PartBuffer` for a turn's parts (see its arguments)."""
        return PartBuffer(self, turn_id, sink, lock, next_index)

    def _raise_broken(self) -> None:
        if self._failed is not None:
            raise StoreError(f"the store failed: {self._failed}")
        raise StoreError("the store is closed")

    def _enqueue(self, item: Any, wake: bool = True) -> None:
        # Without the lock. The writer sets _writer_waiting under the lock and then looks at the
        # queue once more before sleeping, so either it sees this item or we see the flag.
        self._queue.append(item)
        if wake and self._writer_waiting:
            with self._lock:
                self._work.notify()

    def wake_writer(self) -> None:
        """Make the writer thread commit what is queued (after a ``wake=False`` add)."""
        if self._writer_waiting:
            with self._lock:
                self._work.notify()

    def commit_here(self) -> bool:
        """Commit what is queued in the calling thread, when no commit is under way (one
        transaction, then the parts are handed to their sinks, as the writer does). Saves
        the hand-off to the writer thread for a lone part. Call it holding no turn's lock.

        Returns:
            True when this thread committed; False when a commit is under way (whoever runs
            it takes what is queued next: nothing is left behind) or the store is closing or
            failed (the writer drains what is queued).
        """
        if self._broken or not self._queue:
            return False
        if not self._commit_lock.acquire(blocking=False):
            return False
        try:
            if self._broken:
                return False
            self._round()
        finally:
            self._commit_lock.release()
        if self._queue:  # queued meanwhile by threads that found the commit under way
            self.wake_writer()
        return True

    def submit(self, *ops: Op) -> int:
        """Queue ``ops``; they are committed together, in order, after everything queued before.

        Blocks (back-pressure) while too much waits for the writer.

        Returns:
            A ticket for :meth:`wait`.

        Raises:
            StoreError: the store is closed or a write failed.
        """
        with self._lock:
            while len(self._queue) >= MAX_PENDING and not self._broken:
                self._room.wait()
            if self._broken:
                self._raise_broken()
            self._submitted += 1
            ticket = self._submitted
            self._queue.append((ops, ticket))
            if self._writer_waiting:
                self._work.notify()
            return ticket

    def wait_room(self, buffer: PartBuffer, timeout: Optional[float] = None) -> None:
        """Block while ``buffer`` holds :data:`MAX_PENDING` parts or more (back-pressure). Call it
        without holding the buffer's lock.

        Raises:
            StoreError: the store is closed or failed meanwhile.
        """
        with self._lock:
            self._room.wait_for(lambda: len(buffer.texts) < MAX_PENDING or self._broken, timeout)
            if self._broken:
                self._raise_broken()

    def wait(self, ticket: Ticket, timeout: Optional[float] = 30.0) -> None:
        """Block until what ``ticket`` stands for is committed.

        Args:
            ticket: what :meth:`submit` returned, or a :class:`PartTicket`.
            timeout: in seconds; ``None`` waits as long as it takes.

        Raises:
            StoreError: a write failed. TimeoutError: not committed within ``timeout``.
        """
        if isinstance(ticket, PartTicket):
            buffer, index = ticket

            def done() -> bool:
                return buffer.committed > index or self._failed is not None

        else:

            def done() -> bool:
                return self._committed >= ticket or self._failed is not None

        if not done():
            self.commit_here()  # commit it here rather than wait for the writer's turn
        with self._lock:
            ok = self._done.wait_for(done, timeout)
            if self._failed is not None:
                raise StoreError(f"the store failed: {self._failed}")
            if not ok:
                raise TimeoutError(f"the store did not commit within {timeout} s")

    def _run(self) -> None:
        queue = self._queue
        while True:
            if not queue:
                with self._lock:
                    self._writer_waiting = True
                    while not queue and not self._closing:
                        self._work.wait()
                    self._writer_waiting = False
                    if not queue:
                        return
            with self._commit_lock:
                while queue:  # group commit: what queued meanwhile goes in the next round
                    if not self._round():
                        return

    def _round(self) -> bool:
        """Run everything queued in one transaction and publish it; the caller holds the
        commit lock. Returns False when the write failed (the store is failed from then on)."""
        queue = self._queue
        if self._failed is not None:
            return False
        items: List[Any] = []
        try:
            while True:
                items.append(queue.popleft())
        except IndexError:
            pass
        if not items:
            return True
        try:
            published, ticket = self._write(items)
        except BaseException as exc:  # noqa: BLE001 - any failure ends durability
            self._fail(exc)
            return False
        self._publish(published)
        with self._lock:
            for buffer, end in published[0]:
                buffer.committed = end
            if ticket:
                self._committed = ticket
            self._done.notify_all()
            self._room.notify_all()
        return True

    def _write(
        self, items: List[Any]
    ) -> Tuple[Tuple[List[Tuple[PartBuffer, int]], List[Tuple[SegmentSink, Tuple[Any, ...]]], List[Op]], int]:
        """Run ``items`` in one transaction. Returns what to publish and the last ticket."""
        conn = self._conn
        buffers: List[Tuple[PartBuffer, int]] = []
        segments: List[Tuple[SegmentSink, Tuple[Any, ...]]] = []
        parts: List[Op] = []
        ticket = 0
        conn.execute("BEGIN")
        try:
            for item in items:
                if type(item) is PartBuffer:
                    first, texts, metas, marks, ops = item._take()
                    for op in ops:
                        conn.execute(op.sql, op.params)
                    if texts:
                        conn.execute(_SEGMENT_SQL, (item.turn_id, first, len(texts), "\n".join(texts)))
                        segments.append((item.sink, (texts, metas, marks)))
                    buffers.append((item, first + len(texts)))
                else:
                    ops, ticket = item
                    self._write_ops(conn, ops)
                    parts.extend(op for op in ops if op.part is not None)
            conn.execute("COMMIT")
        except BaseException:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            raise
        return (buffers, segments, parts), ticket

    @staticmethod
    def _write_ops(conn: sqlite3.Connection, ops: Sequence[Op]) -> None:
        i, n = 0, len(ops)
        while i < n:
            op = ops[i]
            if op.part is None:
                conn.execute(op.sql, op.params)
                i += 1
                continue
            # A run of parts of one turn with consecutive indexes: one segment.
            turn_id, first = op.params[0], op.part.index
            j = i + 1
            while (
                j < n
                and ops[j].part is not None
                and ops[j].params[0] == turn_id
                and ops[j].part.index == first + (j - i)  # type: ignore[union-attr]
            ):
                j += 1
            texts = [o.part.text for o in ops[i:j]]  # type: ignore[union-attr]
            conn.execute(_SEGMENT_SQL, (turn_id, first, j - i, "\n".join(texts)))
            i = j

    def _publish(
        self,
        published: Tuple[List[Tuple[PartBuffer, int]], List[Tuple[SegmentSink, Tuple[Any, ...]]], List[Op]],
    ) -> None:
        _, segments, parts = published
        for sink, (texts, metas, marks) in segments:
            try:
                sink.publish_segment(texts, metas, marks)
            except Exception:  # a sink bug must not stop the writer
                log.exception("publishing committed parts failed")
        if not parts:
            return
        groups: Dict[int, List[StoredPart]] = {}
        sinks: Dict[int, PartSink] = {}
        for op in parts:
            if op.sink is not None and op.part is not None:
                key = id(op.sink)
                sinks[key] = op.sink
                groups.setdefault(key, []).append(op.part)
        for key, group in groups.items():
            try:
                sinks[key].publish(group)
            except Exception:  # a sink bug must not stop the writer
                log.exception("publishing committed parts failed")

    def _fail(self, exc: BaseException) -> None:
        log.critical(
            "store write failed; parts can no longer be made durable: %s: %s", type(exc).__name__, exc
        )
        with self._lock:
            self._failed = exc
            self._broken = True
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
            self._broken = True
            self._work.notify_all()
            self._room.notify_all()
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.error("store writer did not finish within %s s", timeout)
            return
        # Held for good from here: the connection closes under no commit (commit_here gives up
        # on a broken store before it takes the lock).
        if not self._commit_lock.acquire(timeout=timeout):  # a commit_here still under way
            log.error("a commit did not finish within %s s", timeout)
            return
        with self._read_lock:
            self._reader.close()
        if self._failed is None:
            try:  # closed cleanly: the next bridge need not look for lost writes
                self._conn.execute("UPDATE meta SET value = '0' WHERE key = 'dirty'")
            except sqlite3.Error as exc:
                log.warning("store %s: cannot clear its open mark: %s", self.path, exc)
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
        """Return every committed part of ``turn_id``, in index order (its segments split).

        Raises:
            StoreError: the segments do not make one gapless log (a damaged file).
        """
        with self._read_lock:
            return _load_parts(self._reader, turn_id)

    def load_always(self, session_id: str) -> List[str]:
        """Return the tool names session ``session_id`` allowed always (committed), sorted."""
        rows = self._query(
            "SELECT tool_name FROM approval_always WHERE session_id = ? ORDER BY tool_name", (session_id,)
        )
        return [row[0] for row in rows]

    def load_messages_taken(self, turn_id: str) -> int:
        """Return how many user messages the completed steps of ``turn_id`` took (0 if none)."""
        rows = self._query("SELECT taken FROM turn_messages WHERE turn_id = ?", (turn_id,))
        return int(rows[0][0]) if rows else 0

    def counts(self) -> Dict[str, int]:
        """Return ``{"sessions": n, "turns": n, "running": n}`` of what is committed."""
        with self._read_lock:
            return _counts(self._reader)


def _load_parts(conn: sqlite3.Connection, turn_id: str) -> List[StoredPart]:
    rows = conn.execute(
        "SELECT first_idx, n_parts, parts FROM segments WHERE turn_id = ? ORDER BY first_idx", (turn_id,)
    ).fetchall()
    out: List[StoredPart] = []
    for first, count, joined in rows:
        texts = [joined] if count == 1 else joined.split("\n")
        if first != len(out) or len(texts) != count:
            raise StoreError(f"turn {turn_id!r}: the stored log is damaged at part {len(out)}")
        out.extend(_stored_part(first + i, text) for i, text in enumerate(texts))
    return out


def _counts(conn: sqlite3.Connection) -> Dict[str, int]:
    (sessions,) = conn.execute("SELECT COUNT(*) FROM sessions").fetchone()
    turns, running = conn.execute(
        "SELECT COUNT(*), COALESCE(SUM(status = 'running'), 0) FROM turns"
    ).fetchone()
    return {"sessions": int(sessions), "turns": int(turns), "running": int(running)}


def _open_read_only(path: str) -> sqlite3.Connection:
    if not os.path.exists(path):
        raise FileNotFoundError(path)
    uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"
    return sqlite3.connect(uri, uri=True, timeout=5.0)


def read_parts(path: str, turn_id: str) -> List[StoredPart]:
    """Read a turn's committed parts from a store file, read-only, without a running bridge
    (tools and tests; the layout is this module's business).

    Args:
        path: a ``bridge.sqlite3`` file of the current schema (:data:`SCHEMA_VERSION`).
        turn_id: the turn.

    Returns:
        Its parts in index order (empty for an unknown turn).

    Raises:
        FileNotFoundError: no file at ``path``. sqlite3.Error: not a readable store of this
        layout. StoreError: the log is damaged.
    """
    conn = _open_read_only(path)
    try:
        return _load_parts(conn, turn_id)
    finally:
        conn.close()


def summary(path: str) -> Dict[str, int]:
    """Count what a bridge's store holds, without a running bridge and without writing to it.

    ``running`` counts unfinished turns (running now, or left unfinished by a bridge that
    died; the next ``StartTurn`` continues those).

    Args:
        path: a ``bridge.sqlite3`` file.

    Returns:
        ``{"sessions": n, "turns": n, "running": n}``; all zero for a store with no tables yet.

    Raises:
        FileNotFoundError: no file at ``path``.
        sqlite3.Error: the file is not a readable SQLite database.
    """
    conn = _open_read_only(path)
    try:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not {"sessions", "turns"} <= tables:
            return {"sessions": 0, "turns": 0, "running": 0}
        return _counts(conn)
    finally:
        conn.close()

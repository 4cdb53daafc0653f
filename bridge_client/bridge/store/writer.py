"""The store's writer: one thread that takes everything queued, runs it in one transaction,
commits, and only then hands the committed parts to their sinks (group commit); a thread may
commit what it queued itself when no commit is under way (:meth:`StoreWriter.commit_here`,
the inline hand-off). Parts reach it through a turn's :class:`PartBuffer`, appended without
the store's lock; other writes as :class:`~bridge_client.bridge.store.Op` values."""
from __future__ import annotations

import logging
import sqlite3
import threading
from collections import deque
from typing import Any, Callable, Deque, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

from .ops import SEGMENT_SQL, Op, fold_turn_row
from .records import Meta, PartSink, SegmentSink, StoredPart, StoreError
from .served import ServedRecord

__all__ = ["StoreWriter", "PartBuffer", "PartTicket", "Ticket", "MAX_PENDING"]

log = logging.getLogger("bridge_client.bridge.store")  # one logger for the whole store

MAX_PENDING = 65536
"""Parts (or ops) waiting for the writer before an appender blocks (back-pressure on a driver
faster than the disk)."""


class PartTicket(NamedTuple):
    """What :meth:`StoreWriter.wait` waits for: the part at ``index`` of ``buffer`` committed."""

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
        sink: gets the parts once committed (:class:`~bridge_client.bridge.store.SegmentSink`).
        lock: the lock that orders the turn's appends (the caller's; the writer takes it
            briefly to take the buffer).
        next_index: the index of the next part (the number of parts already in the log).

    Hold ``lock`` to call :meth:`add`.
    """

    __slots__ = ("store", "turn_id", "sink", "lock", "first", "texts", "metas", "marks", "ops", "queued",
                 "committed")

    def __init__(
        self, store: "StoreWriter", turn_id: str, sink: SegmentSink, lock: threading.Lock, next_index: int = 0
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

        ``wake=False``: the caller commits it itself (:meth:`StoreWriter.commit_here`, after
        releasing ``lock``) or wakes the writer (:meth:`StoreWriter.wake_writer`).

        Returns:
            How many parts wait in the buffer now (call :meth:`StoreWriter.wait_room` after
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
        """Return the ticket of part ``index`` for :meth:`StoreWriter.wait`."""
        return PartTicket(self, index)

    def _take(self) -> Tuple[int, List[str], List[Meta], List[Meta], List[Op]]:
        with self.lock:
            taken = (self.first, self.texts, self.metas, self.marks, self.ops)
            self.first += len(self.texts)
            self.texts, self.metas, self.marks, self.ops = [], [], [], []
            self.queued = False
            return taken


class StoreWriter:
    """The write side of a :class:`~bridge_client.bridge.store.Store` (which see, for threads
    and errors): the writer thread and what feeds it.

    Args:
        conn: the writer's connection (transactions explicit: ``isolation_level=None``).
        on_fatal: called once, from the thread whose write failed; ``None``: only log it.
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        on_fatal: Optional[Callable[[BaseException], None]],
        served: Optional[ServedRecord] = None,
    ) -> None:
        self._conn = conn
        self._on_fatal = on_fatal
        self._served = served  # noted after each commit that added segments
        # One lock, two conditions (work for the writer, room for submitters) and the threads
        # waiting for a commit: each with the test of its ticket and a lock held for it, which
        # the committing thread releases only when that test passes. A condition notified for
        # all would wake every waiter at every commit (100 sessions opening at once: each
        # round of the group commit woke them all, to find most of their tickets still queued).
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._room = threading.Condition(self._lock)
        self._waiters: List[Tuple[Callable[[], bool], Any]] = []  # (done, held lock), under _lock
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

    @property
    def failure(self) -> Optional[BaseException]:
        """The exception of the write that failed the store (``None`` while it works)."""
        return self._failed

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

    def submit(self, *ops: Op, wake: bool = True) -> int:
        """Queue ``ops``; they are committed together, in order, after everything queued before.

        Blocks (back-pressure) while too much waits for the writer. ``wake=False``: the
        writer is not woken for them; the caller commits them itself right after (:meth:`wait`
        with ``here``, which hands them to whoever commits when a commit is under way). Waking
        a thread costs more than the commit's Python work here, and the writer woken for a
        lone op races the caller's own commit for it.

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
            if wake and self._writer_waiting:
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

    def wait(self, ticket: Ticket, timeout: Optional[float] = 30.0, here: bool = True) -> None:
        """Block until what ``ticket`` stands for is committed.

        Args:
            ticket: what :meth:`submit` returned, or a :class:`PartTicket`.
            timeout: in seconds; ``None`` waits as long as it takes.
            here: commit it in the calling thread when no commit is under way; ``False``
                wakes the writer instead, so that what other threads add meanwhile goes
                into the same transaction.

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
            if here:
                self.commit_here()  # commit it here rather than wait for the writer's turn
            else:
                self.wake_writer()
        entry = None
        if not done():
            with self._lock:
                if not done():
                    held = threading.Lock()
                    held.acquire()
                    entry = (done, held)
                    self._waiters.append(entry)
        if entry is not None and not entry[1].acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
            with self._lock:
                if entry in self._waiters:
                    self._waiters.remove(entry)
                ok = done()
        else:
            ok = True  # released by the commit that made done() true (or by the failure)
        if self._failed is not None:
            raise StoreError(f"the store failed: {self._failed}")
        if not ok:
            raise TimeoutError(f"the store did not commit within {timeout} s")

    def _wake_done(self, everyone: bool = False) -> None:
        """Release the waiters whose ticket is committed (``everyone``: all; the store
        failed). The caller holds ``_lock``."""
        waiters = self._waiters
        if not waiters:
            return
        left = []
        for entry in waiters:
            if everyone or entry[0]():
                entry[1].release()
            else:
                left.append(entry)
        self._waiters = left

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
            self._wake_done()
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
        rowid: Optional[int] = 0  # the last segment's
        conn.execute("BEGIN")
        try:
            for item in items:
                if type(item) is PartBuffer:
                    first, texts, metas, marks, ops = item._take()
                    for op in fold_turn_row(ops) if ops else ops:
                        conn.execute(op.sql, op.params)
                    if texts:
                        rowid = conn.execute(
                            SEGMENT_SQL, (item.turn_id, first, len(texts), "\n".join(texts))
                        ).lastrowid
                        segments.append((item.sink, (texts, metas, marks)))
                    buffers.append((item, first + len(texts)))
                else:
                    ops, ticket = item
                    rowid = self._write_ops(conn, ops) or rowid
                    parts.extend(op for op in ops if op.part is not None)
            conn.execute("COMMIT")
        except BaseException:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            raise
        if rowid and self._served is not None:
            self._served.note(rowid)
        return (buffers, segments, parts), ticket

    @staticmethod
    def _write_ops(conn: sqlite3.Connection, ops: Sequence[Op]) -> Optional[int]:
        """Run ``ops``; returns the rowid of the last segment written (``None``: none)."""
        rowid: Optional[int] = None
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
            rowid = conn.execute(SEGMENT_SQL, (turn_id, first, j - i, "\n".join(texts))).lastrowid
            i = j
        return rowid

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
            self._wake_done(everyone=True)
        if self._on_fatal is not None:
            try:
                self._on_fatal(exc)
            except Exception:
                log.exception("on_fatal failed")

    def _stop_writer(self, timeout: float) -> bool:
        """Commit what is queued, stop the writer thread and take the commit lock for good.
        Returns False (nothing more to do) when the store is closing already, or when the
        writer or a commit did not finish within ``timeout`` seconds (logged)."""
        with self._lock:
            if self._closing:
                return False
            self._closing = True
            self._broken = True
            self._work.notify_all()
            self._room.notify_all()
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.error("store writer did not finish within %s s", timeout)
            return False
        # Held for good from here: the connection closes under no commit (commit_here gives up
        # on a broken store before it takes the lock).
        if not self._commit_lock.acquire(timeout=timeout):  # a commit_here still under way
            log.error("a commit did not finish within %s s", timeout)
            return False
        return True

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

The package, by concept (arrows point down): :mod:`.records` (rows, sinks, the error),
:mod:`.part_json` (a part's JSON text), :mod:`.schema` (tables, versions, PRAGMAs, opening and
checking the file), :mod:`.ops` (writes as data), :mod:`.writer` (the writer thread, group
commit, the inline hand-off, :class:`PartBuffer`), :mod:`.reads` (reading the log back); this
module puts them together as :class:`Store`. Import its names from here.
"""
from __future__ import annotations

import logging
import os
import sqlite3
import urllib.parse
from typing import Callable, Optional

from .ops import (
    Op,
    allow_always_op,
    checkpoint_op,
    finish_op,
    interactive_op,
    messages_taken_op,
    part_op,
    session_op,
    turn_op,
)
from .part_json import _encode_str as _encode_str  # the bridge's turns encode parts with these
from .part_json import _utf8_checked as _utf8_checked
from .part_json import json_text, part_text, text_parts
from .reads import StoreReader, read_parts, summary
from .records import Meta, PartSink, SegmentSink, StoredPart, StoredSession, StoredTurn, StoreError
from .served import ServedRecord, find_loss
from .schema import SCHEMA_VERSION, SYNCHRONOUS, connect, open_meta, open_schema
from .space import StoreFull, autocheckpoint_pages, check_start_room, checkpoint_room
from .writer import MAX_PENDING, PartBuffer, PartTicket, StoreWriter, Ticket

__all__ = [
    "Store",
    "StoreError",
    "StoreFull",
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
    "interactive_op",
    "messages_taken_op",
    "json_text",
    "part_text",
    "text_parts",
    "summary",
    "find_loss",
    "read_parts",
    "SYNCHRONOUS",
]

log = logging.getLogger("bridge_client.bridge.store")


class Store(StoreWriter, StoreReader):
    """The SQLite store of one bridge: every part is committed before any reader sees it.

    Args:
        path: the database file (``<state>/bridge.sqlite3``); created when missing, migrated
            when of the first layout.
        on_fatal: called once, from the writer thread, when a write fails; the store refuses
            every later write with :class:`StoreError`. ``None``: only log it.
        synchronous: ``FULL`` (default, :data:`SYNCHRONOUS`) or ``NORMAL``.

    Attributes:
        generation: the file's generation id (32 hex digits; new with a new file).
        was_dirty: the file was marked open by a bridge that did not close it (it died), or
            that closed it with its ``-wal`` kept (no room on the disk to checkpoint it).

    Raises:
        StoreFull: the disk has too little room to start (less than
            :data:`~bridge_client.bridge.store.space.MARGIN` free, or not enough for the open
            mark): its text says how much space is needed; nothing was written.
        StoreError: the file is of a newer schema version. sqlite3.Error / OSError: it cannot
            be opened.

    Opening checkpoints the ``-wal`` into the file only when that fits on the disk; else the
    store serves with its ``-wal`` as it is (see :mod:`.space`).

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
        conn = connect(path, synchronous)
        try:
            open_schema(conn, path)
            self.generation, self.was_dirty = open_meta(conn, path)
            check_start_room(path)  # after the checkpoint, which may have freed the -wal's space
            (page_size,) = conn.execute("PRAGMA page_size").fetchone()
            conn.execute(f"PRAGMA wal_autocheckpoint={autocheckpoint_pages(path, int(page_size))}")
            reader = connect(path, synchronous)
            (highest,) = reader.execute("SELECT max(rowid) FROM segments").fetchone()
        except BaseException:
            # A start that cannot finish leaves the disk as it found it: closing the last
            # connection would checkpoint the -wal into the file (growing it into the space
            # that was freed) when that may not fit.
            keep = _keep_wal(path)
            conn.close()
            if keep is not None:
                keep.close()
            raise
        StoreReader.__init__(self, reader)
        served = ServedRecord.open(path, self.generation, highest or 0)  # see find_loss
        StoreWriter.__init__(self, conn, on_fatal, served)  # starts the writer thread

    def _room_to_checkpoint(self) -> bool:
        try:
            if checkpoint_room(self._conn, self.path).fits:
                return True
        except sqlite3.Error as exc:
            log.warning("store %s: cannot ask its size: %s", self.path, exc)
            return True
        log.warning("store %s: closed with its -wal kept: no room on the disk to checkpoint it", self.path)
        return False

    def close(self, timeout: float = 10.0) -> None:
        """Commit what is queued, stop the writer and close both connections. Idempotent.

        Args:
            timeout: in seconds, how long to wait for the writer to drain.
        """
        if not self._stop_writer(timeout):
            return
        self._close_reader()
        keep = None if self._failed is None else _keep_wal(self.path)
        if keep is None and self._failed is None and not self._room_to_checkpoint():
            # Closing the last connection checkpoints: when that does not fit on the disk, the
            # -wal stays as it is, and so does the open mark (clearing it would add to the -wal;
            # a marked file with its -wal is no loss).
            keep = _keep_wal(self.path)
        if keep is None and self._failed is None:
            try:  # closed cleanly: the next bridge need not look for lost writes
                self._conn.execute("UPDATE meta SET value = '0' WHERE key = 'dirty'")
            except sqlite3.Error as exc:
                log.warning("store %s: cannot clear its open mark: %s", self.path, exc)
        self._conn.close()
        if keep is not None:
            keep.close()
        if self._served is not None:
            self._served.close()


def _keep_wal(path: str) -> Optional[sqlite3.Connection]:
    """After a failed write (a full disk), after a failed open, or when a checkpoint does not
    fit on the disk, keep the ``-wal`` for the next bridge, as after a crash: closing the last
    connection would checkpoint it into the file and remove it, and a file marked open without
    its ``-wal`` looks like one that lost writes, which the next bridge moves aside (its turns
    would run again from their prompts). Clearing the mark needs a write, which the full disk
    may refuse; a read-only connection that closes last neither checkpoints nor removes the
    ``-wal``, and writes nothing. Returns that connection (close it after the writer's), or
    ``None`` when it cannot be opened."""
    try:
        uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"
        keep = sqlite3.connect(uri, uri=True, check_same_thread=False)
        keep.execute("SELECT count(*) FROM meta").fetchone()  # holds the file while the writer closes
    except sqlite3.Error as exc:
        log.warning("store %s: cannot keep its -wal after the failed write: %s", path, exc)
        return None
    return keep

"""The store's record of what it committed, kept beside the file, to find commits that the
write-ahead log lost.

SQLite reads a ``-wal`` up to its first frame whose checksum fails and silently ignores the
rest; a ``-wal`` cut short loses its last frames the same way. Either way, parts that readers
saw are gone, and nothing in the file says so. So the writer notes, after each commit that
added a segment, that segment's ``rowid`` (segments are never deleted, so their rowids only
grow) in ``<store>-served``: 48 bytes (the store's generation, the rowid, and the rowid again
xor a constant), written through a shared memory mapping, so a note costs a copy of 16 bytes
and no system call, and survives a SIGKILL of the bridge (the page is the kernel's). The
next bridge, before SQLite opens the file for writing, compares it with the highest rowid
the file shows (:func:`find_loss`): lower means committed batches of parts were lost.

A note is made after the commit's fsync, so on a power loss the record may only be behind
the file (or unreadable: no verdict), never ahead of it. With ``synchronous=NORMAL`` a power
loss may drop commits that readers saw while their note reached the disk: that is a loss, and
is reported as one."""
from __future__ import annotations

import logging
import mmap
import os
import sqlite3
import struct
import urllib.parse
from typing import Optional

__all__ = ["SUFFIX", "ServedRecord", "find_loss"]

log = logging.getLogger("bridge_client.bridge.store")

SUFFIX = "-served"
"""The record's file: the store's path with this suffix."""

_FORMAT = "<32sQQ"  # generation (32 hex digits), highest committed segment rowid, its check
_SIZE = struct.calcsize(_FORMAT)
_CHECK = 0x5A17_C0DE_B10B_10C5


def _read(path: str) -> Optional["tuple[str, int]"]:
    """The record at ``path`` as ``(generation, rowid)``, or ``None`` (missing, short, torn)."""
    try:
        with open(path + SUFFIX, "rb") as f:
            data = f.read(_SIZE)
    except OSError:
        return None
    if len(data) != _SIZE:
        return None
    generation, rowid, check = struct.unpack(_FORMAT, data)
    if rowid ^ _CHECK != check:
        return None
    return generation.decode("ascii", "replace"), int(rowid)


def find_loss(path: str) -> Optional[str]:
    """Why the store ``path`` lost commits that its record says were made, or ``None`` (no
    loss, no record, a record of another file, or the file cannot be read here: the open that
    follows says why). Opens the file read-only: nothing is written, the ``-wal`` is left as it
    is (for inspection)."""
    record = _read(path)
    if record is None or not os.path.exists(path):
        return None
    uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=5.0)
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
            (highest,) = conn.execute("SELECT max(rowid) FROM segments").fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    generation, noted = record
    if row is None or row[0] != generation or noted <= (highest or 0):
        return None
    return (
        f"its write-ahead log ({os.path.basename(path)}-wal) is damaged or cut short: the "
        f"bridge committed parts up to segment {noted}, the file shows up to {highest or 0}, "
        "so parts that readers saw are lost"
    )


class ServedRecord:
    """The writer's side of the record: :meth:`note` after a commit that added segments.

    Args:
        path: the store file (the record is ``path + SUFFIX``).
        generation: the store's generation (32 hex digits).
        highest: the highest segment rowid the file holds now.

    Raises:
        OSError: the record cannot be made (a full disk): the store goes on without it
            (:meth:`open` logs and returns ``None``).
    """

    def __init__(self, path: str, generation: str, highest: int) -> None:
        fd = os.open(path + SUFFIX, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            data = struct.pack(_FORMAT, generation.encode("ascii"), highest, highest ^ _CHECK)
            # Written, not only sized: the page must be the file's before it is mapped (a
            # mapped page of a hole on a full disk faults the process).
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, _SIZE)
            self._map = mmap.mmap(fd, _SIZE)
        finally:
            os.close(fd)
        self._last = highest

    @classmethod
    def open(cls, path: str, generation: str, highest: int) -> Optional["ServedRecord"]:
        """Make the record, or ``None`` (logged) when the disk cannot take it."""
        try:
            return cls(path, generation, highest)
        except (OSError, ValueError) as exc:
            log.warning("store %s: no record of its commits (%s): a damaged -wal goes unnoticed", path, exc)
            return None

    def note(self, rowid: int) -> None:
        """Record that segment ``rowid`` is committed (after the commit). Call it holding the
        store's commit lock (the writer thread, or a thread committing inline)."""
        if rowid > self._last:
            self._last = rowid
            struct.pack_into("<QQ", self._map, 32, rowid, rowid ^ _CHECK)

    def close(self) -> None:
        """Unmap the record (what it holds stays in the file)."""
        try:
            self._map.close()
        except (OSError, ValueError):
            pass

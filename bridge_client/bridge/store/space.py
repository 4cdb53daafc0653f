"""Room on the disk for the store's checkpoints: a checkpoint copies the write-ahead log's pages
into the main file, which grows first (the ``-wal`` is emptied only after), so on a nearly full
disk a checkpoint that cannot finish fills the space that was freed and gives none back.

:func:`checkpoint_room` says how much a checkpoint needs and how much is free; the store
checkpoints only when it fits (at open and at close) and else serves with its ``-wal`` as it is.
:class:`StoreFull` is the error of a start that cannot be avoided: it says how much space the
store needs."""
from __future__ import annotations

import os
import sqlite3
from typing import NamedTuple

from .records import StoreError

__all__ = [
    "Room",
    "StoreFull",
    "checkpoint_room",
    "check_start_room",
    "free_bytes",
    "autocheckpoint_pages",
    "MARGIN",
    "SLACK",
    "UNKNOWN",
    "AUTOCHECKPOINT",
]

MARGIN = 128 * 1024
"""Bytes a bridge needs free to start, after its checkpoint (its first turn's writes,
``bridge.log``'s lines). A bridge started with less would fail at its first write, in the
middle of a request."""


class Room(NamedTuple):
    """What a checkpoint of the store needs and what the disk has, in bytes.

    Attributes:
        growth: how much the main file grows when every page of the ``-wal`` is copied in
            (0 when it holds them all already).
        free: what the file system lets this process write (root may use the reserved blocks).
    """

    growth: int
    free: int

    @property
    def fits(self) -> bool:
        """True when the growth and :data:`SLACK` fit in the free space (a checkpoint that
        finishes then empties the ``-wal``: it gives back more than it took)."""
        return self.growth + SLACK <= self.free


class StoreFull(StoreError):
    """The store cannot start on the disk as it is: its text says how much space it needs.

    Args:
        path: the store file.
        needed: bytes the store needs free (at least).
        free: bytes free now.
        cause: SQLite's words (``database or disk is full``).

    Attributes:
        needed, free: as given (bytes). ``space_needed``: ``needed`` (what
        :func:`~bridge_client.state_dir.unwritable.unwritable_reason` looks for).
    """

    def __init__(self, path: str, needed: int, free: int, cause: str) -> None:
        self.path = path
        self.needed = needed
        self.free = free
        self.space_needed = needed
        super().__init__(
            f"{cause}: the store {os.path.basename(path)} needs about {_kib(needed)} free to start, "
            f"{_kib(free)} are free; free at least {_kib(max(0, needed - free))} more under "
            f"{os.path.dirname(path) or '.'}"
        )


def _kib(n: int) -> str:
    return f"{(n + 1023) // 1024} KiB"


SLACK = 4096
"""Bytes a checkpoint needs free beyond its growth of the main file: one block, for rounding
(the growth is exact: the pages SQLite sees beyond the file's end; pages within it are written
over blocks the file has, and the ``-shm`` index exists already)."""

UNKNOWN = 1 << 62
"""What :func:`free_bytes` says of a file system that cannot be asked: no limit known."""


def free_bytes(path: str) -> int:
    """Bytes this process may still write on the file system of ``path``; :data:`UNKNOWN`
    when it cannot be asked or reports no sizes (some FUSE ones)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return UNKNOWN
    if st.f_blocks == 0:
        return UNKNOWN
    blocks = st.f_bfree if os.geteuid() == 0 else st.f_bavail
    return int(blocks * st.f_frsize)


AUTOCHECKPOINT = 1000
"""SQLite's default ``wal_autocheckpoint`` (pages): kept on a disk with room for it."""


def autocheckpoint_pages(path: str, page_size: int) -> int:
    """The ``wal_autocheckpoint`` (pages) for the store ``path``: SQLite's default, or fewer on a
    disk where the ``-wal`` would take more than a quarter of the free space before its first
    checkpoint (at least 16 pages). A ``-wal`` that fills the disk could never be checkpointed
    (the checkpoint needs room to grow the main file first)."""
    free = free_bytes(os.path.dirname(path) or ".")
    return max(16, min(AUTOCHECKPOINT, free // 4 // max(1, page_size)))


def check_start_room(path: str) -> None:
    """Refuse to start the store ``path`` on a disk with less than :data:`MARGIN` free.

    Raises:
        StoreFull: there is less (its text says how much is needed).
    """
    free = free_bytes(os.path.dirname(path) or ".")
    if free < MARGIN:
        raise StoreFull(path, MARGIN, free, "the disk is (nearly) full")


def checkpoint_room(conn: sqlite3.Connection, path: str) -> Room:
    """The room a full checkpoint of the store ``path`` (open on ``conn``) needs, and the free
    space. Reads two PRAGMAs (no write)."""
    (pages,) = conn.execute("PRAGMA page_count").fetchone()  # the size seen through the -wal
    (page_size,) = conn.execute("PRAGMA page_size").fetchone()
    try:
        on_disk = os.path.getsize(path)
    except OSError:
        on_disk = 0
    return Room(max(0, int(pages) * int(page_size) - on_disk), free_bytes(os.path.dirname(path) or "."))

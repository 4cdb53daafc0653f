"""A state directory that cannot take the bridge's writes: a full disk, a quota, a read-only
file system.

That is no crash to recover from by launching again within the resend window: a bridge
launched on it fails the same way. So the bridge program tells its launcher so, apart from
every other failure: it exits with :data:`UNWRITABLE_EXIT`, and, when its launcher gave it a
notice pipe, writes ``unwritable <reason>`` there first (its ``bridge.log`` is on the same
full disk). The host's launcher raises ``BridgeLaunchError(unwritable=True)`` at once
(see :doc:`resilience`, "A full disk").
"""
from __future__ import annotations

import errno
import os
import sys
from typing import Iterator, Optional

__all__ = ["UNWRITABLE_EXIT", "NOTICE_WORD", "UNWRITABLE_ERRNOS", "unwritable_reason", "is_full"]

UNWRITABLE_EXIT = 3
"""The bridge program's exit status when its state directory cannot be written."""

NOTICE_WORD = "unwritable"
"""The first word of the notice line that says so (the rest is the reason)."""

UNWRITABLE_ERRNOS = frozenset(
    code for code in (errno.ENOSPC, getattr(errno, "EDQUOT", None), errno.EROFS) if code is not None
)
"""The ``errno`` values of a file system that takes no more writes."""

_SQLITE_FULL = 13  # SQLITE_FULL: "database or disk is full" (a short write, ENOSPC or EDQUOT)
_SQLITE_READONLY = 8  # SQLITE_READONLY: the file or its file system is read-only
_SQLITE_TEXTS = ("database or disk is full", "attempt to write a readonly database")


def _chain(exc: Optional[BaseException]) -> Iterator[BaseException]:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def unwritable_reason(exc: Optional[BaseException]) -> Optional[str]:
    """Why the file system refused a write, when ``exc`` (or an exception it was raised from,
    or during) says it takes no more writes; else ``None``.

    Args:
        exc: an exception, or ``None``.

    Returns:
        A short reason (SQLite's words, or the ``errno`` text; the store's own error, which
        says how much space it needs, as it is), or ``None`` for any other
        failure (a damaged file, a lock, an I/O error of the disk).
    """
    # sqlite3 is not imported for this: a bridge that loses the lock race never imports it
    # (and no SQLite error can exist before it is).
    sqlite3 = sys.modules.get("sqlite3")
    for item in _chain(exc):
        if isinstance(getattr(item, "space_needed", None), int):  # the store's own: says how much
            return str(item)
        if isinstance(item, OSError) and item.errno is not None and item.errno in UNWRITABLE_ERRNOS:
            return os.strerror(item.errno)
        if sqlite3 is not None and isinstance(item, sqlite3.Error):
            code = getattr(item, "sqlite_errorcode", None)  # Python 3.11+
            if isinstance(code, int) and (code & 0xFF) in (_SQLITE_FULL, _SQLITE_READONLY):
                return str(item)
            if any(text in str(item).lower() for text in _SQLITE_TEXTS):
                return str(item)
    return None


def is_full(path: str) -> bool:
    """True when the file system of ``path`` has no block (or no inode) left for this user,
    or is mounted read-only; False when it has, or cannot be asked (or reports no sizes)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    if st.f_flag & os.ST_RDONLY:
        return True
    if st.f_blocks == 0:  # a file system that reports no sizes (some FUSE ones): no word
        return False
    root = os.geteuid() == 0  # root may use the blocks and inodes kept for it
    blocks, inodes = (st.f_bfree, st.f_ffree) if root else (st.f_bavail, st.f_favail)
    return blocks == 0 or (st.f_files > 0 and inodes == 0)

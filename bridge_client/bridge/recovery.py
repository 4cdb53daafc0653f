"""Opening the bridge's store when the file on disk cannot be trusted.

A store that SQLite refuses (``database disk image is malformed``, ``file is not a
database``), one that a bridge left open (it died) whose write-ahead log (``-wal``) is now
gone, or one whose ``-wal`` is damaged or cut short so that segments named by its record of
commits are missing (:func:`~bridge_client.bridge.store.find_loss`: SQLite itself drops such
frames without a word) -- in the last two cases writes that readers may have seen are lost --
is moved aside, kept for inspection with its ``-wal``, ``-shm`` and ``-served`` files, and
named in ``bridge.log``; the bridge starts with a
fresh file, which has a new generation. Sessions come back from the hosts' session states
(every connection opens its session from the state the host holds), and a host that
resumes a turn of the old generation runs it again from its prompt, never
splicing the logs of two generations.

A store of a newer layout (:class:`~bridge_client.bridge.store.StoreError`) and errors of the
file system (permissions, a full disk: ``sqlite3.OperationalError``) are not damage: they are
raised as they are, and the file is left alone.
"""
from __future__ import annotations

import logging
import os
import sqlite3
import time
from typing import Callable, NamedTuple, Optional, Union

from .store import SYNCHRONOUS, Store, find_loss
from .store.served import SUFFIX as SERVED_SUFFIX

__all__ = ["OpenedStore", "open_store", "is_damage", "move_aside"]

log = logging.getLogger("bridge_client.bridge.store")

_DAMAGE_NAMES = ("SQLITE_CORRUPT", "SQLITE_NOTADB")
_DAMAGE_TEXTS = ("malformed", "not a database", "file is encrypted")
_SIDE_FILES = ("", "-wal", "-shm", "-journal", SERVED_SUFFIX)


class OpenedStore(NamedTuple):
    """What :func:`open_store` opened.

    Attributes:
        store: the open store.
        moved: where the old file went (``None``: it was used as it was).
        reason: why it was moved aside (``None`` when it was not).
    """

    store: Store
    moved: Optional[str]
    reason: Optional[str]


def is_damage(exc: BaseException) -> bool:
    """True when ``exc`` says the file is not a usable SQLite database (corrupt, or not SQLite
    at all), as opposed to a file-system error or a lock."""
    if not isinstance(exc, sqlite3.DatabaseError) or isinstance(exc, sqlite3.OperationalError):
        return False
    name = getattr(exc, "sqlite_errorname", "") or ""
    if any(name.startswith(n) for n in _DAMAGE_NAMES):
        return True
    text = str(exc).lower()
    return any(t in text for t in _DAMAGE_TEXTS)


def move_aside(path: str, now: Optional[float] = None) -> str:
    """Rename the store ``path`` and its ``-wal``, ``-shm`` and ``-journal`` files to
    ``<path>.damaged-<UTC time>`` (plus the same suffixes), so that SQLite still pairs them.

    Returns:
        The new name of the main file.

    Raises:
        OSError: a file cannot be renamed.
    """
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    base = f"{path}.damaged-{stamp}"
    target, n = base, 1
    while any(os.path.lexists(target + suffix) for suffix in _SIDE_FILES):
        n += 1
        target = f"{base}.{n}"
    for suffix in _SIDE_FILES:
        if os.path.lexists(path + suffix):
            os.rename(path + suffix, target + suffix)
    return target


def _open_as_it_is(
    path: str, on_fatal: Optional[Callable[[BaseException], None]], synchronous: str, wal_existed: bool
) -> "Union[Store, str]":
    """The store at ``path`` opened, or why it cannot be trusted (it is then closed)."""
    try:
        store = Store(path, on_fatal=on_fatal, synchronous=synchronous)
    except sqlite3.DatabaseError as exc:
        if not is_damage(exc):
            raise
        return f"SQLite cannot read it ({exc})"
    if not (store.was_dirty and not wal_existed):
        return store
    store.close()
    return (
        "the bridge that last had it open did not close it, and its write-ahead log "
        f"({os.path.basename(path)}-wal) is gone: its latest writes are lost"
    )


def open_store(
    path: str,
    on_fatal: Optional[Callable[[BaseException], None]] = None,
    synchronous: str = SYNCHRONOUS,
) -> OpenedStore:
    """Open the store at ``path``; move a damaged one (or one that lost its ``-wal``) aside
    and start a fresh one (see the module's docstring).

    Raises:
        StoreError: the file is of a newer layout (left alone).
        sqlite3.Error, OSError: it cannot be opened for another reason than damage, or the
            fresh file cannot be made either.
    """
    wal_existed = os.path.exists(path + "-wal")
    # Before SQLite opens it for writing: the first write (or checkpoint) would overwrite the
    # damaged frames of the -wal, which are kept for inspection.
    reason = find_loss(path)
    if reason is None:
        opened = _open_as_it_is(path, on_fatal, synchronous, wal_existed)
        if isinstance(opened, Store):
            return OpenedStore(opened, None, None)
        reason = opened
    moved = move_aside(path)
    log.warning(
        "store %s is damaged: %s. Moved it aside as %s (kept, with its -wal and -shm files) and "
        "started a fresh store; sessions come back from their hosts' states, and turns of the "
        "old store run again from their prompts",
        path,
        reason,
        moved,
    )
    store = Store(path, on_fatal=on_fatal, synchronous=synchronous)
    return OpenedStore(store, moved, reason)

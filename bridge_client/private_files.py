"""Files and folders only this user made: opened without following symlinks and without
blocking, and checked by type, owner and mode before they are used.

The secret, the home folder, state directories and the files in them (the token, the lock,
``bridge.log``, ``listening.json``) decide who may reach a bridge. A file that another user
could have made or swapped is treated as absent, or refused with :class:`UntrustedFile`:

- a symlink is never followed (``O_NOFOLLOW`` for files, ``lstat`` for folders): a planted
  ``lock`` or ``bridge.log`` link would make us truncate or append to its target, and a
  linked state directory would receive the token and the store;
- only a regular file is read (``O_NONBLOCK`` for the open, then ``fstat``): a FIFO in place
  of ``listening.json`` would block ``open()`` for ever;
- the owner must be this process's effective user, and nobody else may write it (group or
  other write bits); a *private* file or folder may not be readable by others either.

Host and bridge use the same checks (the bridge at start-up, on its state directory). See
:doc:`security`.
"""
from __future__ import annotations

import errno
import os
import stat
import tempfile
from typing import Optional

from .errors import UntrustedFile

__all__ = ["check_stat", "check_folder", "open_private", "read_private", "write_whole", "MAX_STATE_FILE"]

MAX_STATE_FILE = 1 << 20
"""Bytes at most read from one small state file (secret, token, listening or launch file)."""

_NO_FOLLOW = os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def check_stat(st: os.stat_result, path: str, *, folder: bool = False, private: bool = False) -> None:
    """Refuse what ``lstat``/``fstat`` says is not this user's own file (or folder).

    Args:
        st: the result of ``os.lstat(path)`` or ``os.fstat`` of a descriptor opened no-follow.
        path: named in the message.
        folder: expect a folder rather than a regular file.
        private: also refuse read (and, for folders, search) bits for group and others.

    Raises:
        UntrustedFile: a symlink, not the expected type, owned by another user, writable by
            others, or (``private``) readable by others.
    """
    what = "folder" if folder else "file"
    if stat.S_ISLNK(st.st_mode):
        raise UntrustedFile(f"{path} is a symlink; refusing to follow it (remove it)", path)
    if folder and not stat.S_ISDIR(st.st_mode):
        raise UntrustedFile(f"{path} is not a folder; remove it", path)
    if not folder and not stat.S_ISREG(st.st_mode):
        raise UntrustedFile(
            f"{path} is not a regular file (a FIFO, socket, device or folder); remove it", path
        )
    me = os.geteuid()
    if st.st_uid != me:
        raise UntrustedFile(
            f"the {what} {path} belongs to user id {st.st_uid}, not to this user ({me}); "
            "refusing it: remove it, or use a folder of your own",
            path,
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        fix = "700" if folder else "600"
        raise UntrustedFile(
            f"the {what} {path} is writable by others (mode {mode:o}); run: chmod {fix} {path}", path
        )
    if private and mode & 0o077:
        fix = "700" if folder else "600"
        raise UntrustedFile(
            f"the {what} {path} is readable by others (mode {mode:o}); run: chmod {fix} {path}", path
        )


def check_folder(path: str, *, private: bool = False) -> None:
    """Check an existing folder with :func:`check_stat` (``lstat``: a symlink is refused).

    Raises:
        FileNotFoundError: it does not exist.
        UntrustedFile: see :func:`check_stat`.
    """
    check_stat(os.lstat(path), path, folder=True, private=private)


def open_private(path: str, flags: int = os.O_RDONLY, mode: int = 0o600, *, private: bool = True) -> int:
    """Open a state file without following a symlink and without blocking on a FIFO, and check
    it with :func:`check_stat`; return a blocking descriptor (the caller closes it).

    Args:
        path: the file.
        flags: ``os.open`` flags (``O_CREAT``, ``O_APPEND``, ``O_RDWR``...).
        mode: the mode of a file this creates.
        private: refuse a file readable by others.

    Raises:
        FileNotFoundError: it does not exist (and ``O_CREAT`` was not given).
        UntrustedFile: a symlink, not a regular file, or not this user's (see :func:`check_stat`).
        OSError: it cannot be opened.
    """
    try:
        fd = os.open(path, flags | _NO_FOLLOW, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UntrustedFile(f"{path} is a symlink; refusing to follow it (remove it)", path) from None
        if exc.errno == errno.ENXIO:  # a socket, or a FIFO opened for writing with no reader
            raise UntrustedFile(f"{path} is not a regular file; remove it", path) from None
        raise
    try:
        check_stat(os.fstat(fd), path, private=private)
        os.set_blocking(fd, True)  # O_NONBLOCK only kept open() from waiting on a FIFO
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_private(path: str, *, private: bool = True, limit: Optional[int] = MAX_STATE_FILE) -> bytes:
    """Return the bytes of a small state file opened with :func:`open_private`.

    Args:
        limit: bytes at most; a longer file is refused (``None``: no limit).

    Raises:
        FileNotFoundError: it does not exist.
        UntrustedFile: see :func:`open_private`, or it is longer than ``limit``.
        OSError: it cannot be read.
    """
    fd = open_private(path, os.O_RDONLY, private=private)
    with os.fdopen(fd, "rb") as f:
        data = f.read() if limit is None else f.read(limit + 1)
    if limit is not None and len(data) > limit:
        raise UntrustedFile(f"{path} is longer than {limit} bytes; it is not a state file", path)
    return data


def write_whole(path: str, data: bytes, mode: int = 0o600) -> None:
    """Write ``data`` (bytes) at ``path`` whole: a temporary file of ``mode`` in the same
    folder, flushed to disk, then renamed over ``path``. Readers see the old file or the new
    one, never half of one; a failure at any point leaves ``path`` as it was and removes the
    temporary file. The folder must exist.

    Raises:
        OSError: the folder cannot be written (``FileNotFoundError`` when it does not exist).
    """
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=os.path.dirname(path) or ".")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise

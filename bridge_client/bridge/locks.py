"""The state directory's two locks: the start lock (a bridge that finds another one
starting waits, in the kernel, until that one listens) and the lock that makes one bridge the
only one on its state directory.
"""
from __future__ import annotations

import errno
import fcntl
import os
import signal
import threading
import time
from typing import Any, Optional

from ..errors import UntrustedFile
from ..private_files import open_private
from ..state_dir import identity
from .launch import LaunchError

__all__ = ["release_lock", "take_lock", "take_start_lock"]

_START_WAIT = 30.0  # seconds a bridge waits for another one's start before trying the lock anyway


class _StartWaitOver(Exception):
    """The wait for another bridge's start ran out."""


def _raise_start_wait_over(signum: int, frame: Any) -> None:
    raise _StartWaitOver()


def take_start_lock(state: str) -> Optional[int]:
    """Take the state directory's start lock, waiting (at most ``_START_WAIT`` seconds) while
    another bridge is starting; ``None`` when the wait ran out. The wait blocks in the kernel:
    a bridge that loses the race sleeps until the winner listens."""
    path = os.path.join(state, identity.START_LOCK_FILE)
    try:
        fd = open_private(path, os.O_RDWR | os.O_CREAT, 0o600)
    except UntrustedFile as exc:
        raise LaunchError(f"refusing the start lock file: {exc}") from None
    except OSError as exc:
        raise LaunchError(f"cannot open the start lock file {path}: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd
    except OSError as exc:
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            os.close(fd)
            raise LaunchError(f"cannot lock {path}: {exc.strerror}") from None
    if threading.current_thread() is not threading.main_thread():  # no alarm outside it
        deadline = time.monotonic() + _START_WAIT
        while time.monotonic() < deadline:
            time.sleep(0.01)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except OSError:
                continue
        os.close(fd)
        return None
    previous = signal.signal(signal.SIGALRM, _raise_start_wait_over)
    signal.setitimer(signal.ITIMER_REAL, _START_WAIT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd
    except (_StartWaitOver, OSError):
        os.close(fd)
        return None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def take_lock(state: str) -> Optional[int]:
    """Take the state directory's lock; ``None`` when another bridge holds it.

    Raises:
        LaunchError: the lock file cannot be opened, locked or written (from the ``OSError``:
            on a full disk the bridge program exits 3).
    """
    path = os.path.join(state, identity.LOCK_FILE)
    try:
        # No-follow: a planted symlink would have us truncate its target below.
        fd = open_private(path, os.O_RDWR | os.O_CREAT, 0o600)  # not inherited by children (PEP 446)
    except UntrustedFile as exc:
        raise LaunchError(f"refusing the lock file: {exc}") from None
    except OSError as exc:
        raise LaunchError(f"cannot open the lock file {path}: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return None
        raise LaunchError(f"cannot lock {path}: {exc.strerror}") from None
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
    except OSError as exc:  # a full disk: no bridge can run here (the cause says so, exit 3)
        os.close(fd)
        raise LaunchError(f"cannot write the lock file {path}: {exc.strerror or exc}") from exc
    return fd


def release_lock(fd: int) -> None:
    """Release a lock taken by :func:`take_lock` or :func:`take_start_lock` and close it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)

"""The host's random bytes: session and turn ids, upgrade keys, frame mask keys.

One process-wide pool drawn from ``os.urandom`` 4 KiB at a time, each byte handed out once:
as random as a draw per use, without a ``getrandom`` system call (and a hand-over of the
GIL, which costs most when many threads start sessions at once) per
id and per connection. A forked child never hands out its parent's bytes: the pool is
dropped in the child (``os.register_at_fork``) and whenever the process id is not the one
that drew it (a fork that ran no hooks).
"""
from __future__ import annotations

import os
import threading

__all__ = ["take", "uuid4_hex"]

_DRAW = 4096


class _Pool:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.bytes = b""
        self.pos = 0
        self.pid = -1

    def take(self, n: int) -> bytes:
        with self.lock:
            pos = self.pos
            pid = os.getpid()
            if pid != self.pid or pos + n > len(self.bytes):
                self.bytes, self.pid, pos = os.urandom(max(n, _DRAW)), pid, 0
            self.pos = pos + n
            return self.bytes[pos : pos + n]

    def after_fork_in_child(self) -> None:
        self.lock = threading.Lock()  # a thread of the parent may have held it
        self.bytes, self.pos, self.pid = b"", 0, -1


_POOL = _Pool()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_POOL.after_fork_in_child)


def take(n: int) -> bytes:
    """``n`` random bytes (``os.urandom``'s), never handed out before in this process."""
    return _POOL.take(n)


def uuid4_hex() -> str:
    """``uuid.uuid4().hex`` from the pool: 32 hex digits of a random (version 4) UUID."""
    # What uuid.UUID(bytes=..., version=4) sets (the version and variant bits), without its
    # checks and int round trip (a turn id per turn).
    b = bytearray(_POOL.take(16))
    b[6] = (b[6] & 0x0F) | 0x40
    b[8] = (b[8] & 0x3F) | 0x80
    return b.hex()

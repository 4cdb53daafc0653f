"""What a child process does with the parent's connections and sessions after ``os.fork()``.

A forked child inherits the parent's sockets and locks but none of its threads. Sharing a
WebSocket with the parent would interleave both processes' frames on one stream, so the child
drops every inherited connection (it closes its copy of the file descriptor without a
WebSocket close or a TCP shutdown, which would cut the parent's connection too) and its
sessions reopen a connection of their own on first use. Locks that another thread of the
parent held at the moment of the fork are replaced, so the child cannot deadlock on them.

Objects register with :func:`track`; each has an ``_after_fork_in_child()`` method that
:func:`os.register_at_fork` calls in the child. Connections also compare ``os.getpid()``
with the pid that opened them, for a fork that runs no hooks.
"""
from __future__ import annotations

import logging
import os
import threading
import weakref
from typing import Any

__all__ = ["track"]

log = logging.getLogger("bridge_client")

_lock = threading.Lock()
_tracked: "weakref.WeakSet[Any]" = weakref.WeakSet()


def track(obj: Any) -> None:
    """Call ``obj._after_fork_in_child()`` in the child of every later ``os.fork()``, for as
    long as ``obj`` lives (held by a weak reference)."""
    with _lock:
        _tracked.add(obj)


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # another thread may have held it at the fork
    objects = list(_tracked)
    # Connections first: sessions then find their connection already dropped.
    objects.sort(key=lambda o: 0 if type(o).__name__ == "Connection" else 1)
    for obj in objects:
        try:
            obj._after_fork_in_child()
        except Exception:  # pragma: no cover - a child must not die in a fork hook
            log.exception("after fork: could not reset %r", obj)
    if objects:
        log.debug("process %d forked: dropped %d inherited connection(s) and session(s)",
                  os.getpid(), len(objects))


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

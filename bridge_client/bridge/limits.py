"""The bridge's bounds on work: the frame size, the silences and send times a peer
is allowed, and how many connections, handshakes, ReadTurn streams and running turns it takes
at once, from the open-files and task limits of the process.

No I/O beyond reading the process's own limits (``getrlimit``, the cgroup's ``pids.max``).
"""
from __future__ import annotations

import os
import resource
from typing import List, NamedTuple, Optional

__all__ = [
    "MAX_FRAME_BYTES",
    "SILENCE_TIMEOUT",
    "HANDSHAKE_TIMEOUT",
    "MAX_HANDSHAKES",
    "MAX_STREAMS",
    "MAX_STREAMS_PER_CONNECTION",
    "SEND_TIMEOUT",
    "Limits",
    "default_limits",
    "default_max_connections",
    "task_limit",
    "streams_per_connection",
]

MAX_FRAME_BYTES = 16 * 1024 * 1024
"""Largest frame accepted, in bytes; a larger one closes its connection with 1009."""

SILENCE_TIMEOUT = 120.0
"""Seconds without any frame after which a connection counts as dead and is closed. Hosts ping
every 5 s, so this only catches half-open TCP, which would otherwise hold off the idle exit."""

HANDSHAKE_TIMEOUT = 5.0
"""Seconds a new TCP connection has to send its whole HTTP request (upgrade or ``/healthz``);
then it is closed (a slowloris peer holds a slot this long at most)."""

MAX_HANDSHAKES = 64
"""TCP connections at most still in their opening handshake; a new one beyond this drops the
oldest of them (a half-sent request cannot lock newcomers out)."""

MAX_STREAMS = 256
"""ReadTurn streams at once in the whole bridge, at most (each has a thread); beyond, the
request is answered with the retryable ``Overloaded``."""

MAX_STREAMS_PER_CONNECTION = 32
"""ReadTurn streams at once on one connection, at most (a host reads one per turn)."""

SEND_TIMEOUT = 30.0
"""Seconds one frame may take to go into a connection's socket; a peer that reads nothing
for that long has its connection dropped (its send is not waited for)."""

_TASKS_SPARE = 12  # threads kept for the store, the watchers, the shutdown and the driver
_THREADS_PER_CONNECTION = 2  # websockets' sync server: the handler and its frame reader
_FDS_PER_CONNECTION = 4  # the socket and websockets' own per-connection files, with some slack
_FDS_SPARE = 64  # files kept for the store, the log, the driver's commands
_MAX_CONNECTIONS_CAP = 512


def default_max_connections() -> int:
    """The default bound on concurrent TCP connections: what the open-files limit
    (``RLIMIT_NOFILE``, soft) leaves room for, from 8 to 512."""
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):  # pragma: no cover
        return _MAX_CONNECTIONS_CAP
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return _MAX_CONNECTIONS_CAP
    return max(8, min(_MAX_CONNECTIONS_CAP, (soft - _FDS_SPARE) // _FDS_PER_CONNECTION))

class Limits(NamedTuple):
    """The bridge's bounds on work: ``connections`` (TCP), ``streams`` (ReadTurns in all)
    and ``turns`` (running at once)."""

    connections: int
    streams: int
    turns: int


def task_limit() -> Optional[int]:
    """The number of tasks (threads and processes) this bridge may have at most, when it is
    limited: the cgroup's ``pids.max`` (a container's ``--pids-limit``) or, for a user other
    than root, ``RLIMIT_NPROC`` (soft). ``None`` when neither limits it."""
    limits: List[int] = []
    try:
        nproc, _ = resource.getrlimit(resource.RLIMIT_NPROC)
        if os.geteuid() != 0 and nproc != resource.RLIM_INFINITY and nproc > 0:
            limits.append(int(nproc))
    except (OSError, ValueError, AttributeError):  # pragma: no cover
        pass
    pids = _cgroup_pids_max()
    if pids is not None:
        limits.append(pids)
    return min(limits) if limits else None


def _cgroup_pids_max() -> Optional[int]:
    """``pids.max`` of this process's cgroup (v1 ``pids`` controller or v2), or ``None``."""
    try:
        with open("/proc/self/cgroup", encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "pids":
            candidate = os.path.join("/sys/fs/cgroup/pids", path.lstrip("/"), "pids.max")
        elif controllers == "":
            candidate = os.path.join("/sys/fs/cgroup", path.lstrip("/"), "pids.max")
        else:
            continue
        try:
            with open(candidate, encoding="ascii") as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) > 0:
            return int(text)
    return None


def default_limits() -> Limits:
    """The default bounds: from the open-files limit (``RLIMIT_NOFILE``) for connections, and,
    when the task limit (:func:`task_limit`) is finite, shared out of what it leaves so that no
    honest load runs the bridge out of threads: a sixteenth each to streams and turns, the rest
    to connections (two threads each). With 128 tasks: 51 connections, 7 streams, 7 running
    turns; requests beyond get ``Overloaded`` and are resent."""
    connections = default_max_connections()
    streams, turns = MAX_STREAMS, 256
    tasks = task_limit()
    if tasks is not None:
        budget = max(8, tasks - _TASKS_SPARE)
        share = max(2, budget // 16)
        streams, turns = min(streams, share), min(turns, share)
        connections = max(4, min(connections, (budget - streams - turns) // _THREADS_PER_CONNECTION))
    return Limits(connections, streams, turns)


def streams_per_connection(max_streams: int) -> int:
    """The default bound of streams on one connection: a quarter of ``max_streams`` (so that
    one connection cannot take them all), from 1 to :data:`MAX_STREAMS_PER_CONNECTION`."""
    return max(1, min(MAX_STREAMS_PER_CONNECTION, max_streams // 4))

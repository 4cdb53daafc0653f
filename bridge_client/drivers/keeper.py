"""A *keeper* process: kills the process groups of a driver's children when the bridge is
gone, however it died.

A bridge that is SIGKILLed cannot kill its children, and a child in its own session outlives
it. So a driver starts a keeper with its first child: a small Python process in its own
session that reads the process group of every running child from a pipe (``+PGID`` when it
starts, ``-PGID`` once reaped). When the pipe reaches end of file, that is when the bridge is
gone, the keeper SIGKILLs every group still listed and exits. A closing driver closes the pipe
after ending its children itself (the keeper then has nothing left to do).

Used by the ``shell`` driver (its commands) and the ``acp`` driver (its agent processes).
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from typing import IO, Optional

__all__ = ["ProcessKeeper"]

_ENV_PREFIX = "BRIDGE_CLIENT_"

log = logging.getLogger("bridge_client.drivers.keeper")

_KEEPER = """
import os, signal, sys
groups = set()
for line in sys.stdin:
    line = line.strip()
    if line[:1] == "+" and line[1:].isdigit():
        groups.add(int(line[1:]))
    elif line[:1] == "-" and line[1:].isdigit():
        groups.discard(int(line[1:]))
def tree():
    # The processes of the listed groups and all their descendants (a child that made a
    # session of its own, as an agent CLI's tool often does, is no longer in its group).
    parent, group = {}, {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return set()
    for e in entries:
        if e.isdigit():
            try:
                with open("/proc/" + e + "/stat") as f:
                    rest = f.read().rsplit(")", 1)[1].split()
                parent[int(e)], group[int(e)] = int(rest[1]), int(rest[2])
            except (OSError, ValueError, IndexError):
                pass
    found = {p for p, g in group.items() if g in groups}
    grew = True
    while grew:
        grew = False
        for p, pp in parent.items():
            if pp in found and p not in found:
                found.add(p)
                grew = True
    found.discard(os.getpid())
    return found
stopped = set()
for _ in range(5):  # stop the tree first, so that nothing forks or is orphaned meanwhile
    new = tree() - stopped
    if not new:
        break
    for pid in new:
        try:
            os.kill(pid, signal.SIGSTOP)
        except OSError:
            pass
    stopped |= new
for group in groups:
    try:
        os.killpg(group, signal.SIGKILL)
    except OSError:
        pass
for pid in stopped:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
"""
"""The keeper's program: the groups listed when its stdin ends are killed (see the module),
and every descendant of their processes too, stopped first (SIGSTOP) so that none forks or
is orphaned meanwhile: a child that made a session of its own (an agent CLI's tool often
does) dies with its parent's group."""


class ProcessKeeper:
    """The keeper process of one driver (see the module's docstring). Thread-safe; a keeper
    that cannot start or has died is logged once and then left alone: the processes still
    run, only the protection against a SIGKILLed bridge is missing.

    Args:
        what: what it keeps, for log messages (``"shell commands"``, ``"ACP agents"``).
    """

    def __init__(self, what: str = "processes") -> None:
        self._what = what
        self._lock = threading.Lock()
        self._proc: Optional["subprocess.Popen[bytes]"] = None
        self._pipe: Optional[IO[bytes]] = None
        self._failed = False

    def _start(self) -> None:
        # Caller holds the lock. Its own session: a signal to the bridge's group spares it.
        # Its stdin's write end is close-on-exec: the commands do not hold it open.
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _KEEPER],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                start_new_session=True,
                env={k: v for k, v in os.environ.items() if not k.startswith(_ENV_PREFIX)},
            )
            self._pipe = self._proc.stdin
        except OSError as exc:
            self._fail(f"cannot start the keeper of {self._what}: {exc}")

    def _fail(self, message: str) -> None:
        if not self._failed:
            log.warning("%s; a SIGKILLed bridge may leave %s running", message, self._what)
        self._failed = True
        self._pipe = None

    def _say(self, line: str) -> None:
        with self._lock:
            if self._pipe is None and not self._failed and self._proc is None:
                self._start()
            if self._pipe is None:
                return
            try:
                self._pipe.write(line.encode("ascii") + b"\n")
                self._pipe.flush()
            except (OSError, ValueError) as exc:
                self._fail(f"the keeper of {self._what} is gone: {exc}")

    def started(self, group: int) -> None:
        """A command runs in process group ``group``."""
        self._say(f"+{group}")

    def ended(self, group: int) -> None:
        """The command of ``group`` was reaped (or its group killed)."""
        self._say(f"-{group}")

    def close(self) -> None:
        """Close the pipe and reap the keeper (idempotent)."""
        with self._lock:
            pipe, proc, self._pipe, self._proc = self._pipe, self._proc, None, None
            self._failed = True  # no new keeper after close
        if pipe is not None:
            try:
                pipe.close()
            except OSError:
                pass
        if proc is not None:
            try:
                proc.wait(5.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

"""Ending an ACP agent process and everything of its process group, with a grace.

An ACP agent ends when its stdin ends (the protocol's stdio transport has no ``shutdown``
method), so the polite end is closing its stdin. What it started (the Claude Code CLI under
claude-code-acp, a tool's shell) runs in the agent's process group, which the agent's start
made a group of its own (:class:`~bridge_client.drivers.cli_process.JsonLinesProcess`). A
group member that outlives its leader (a tool's process that ignores SIGTERM, or that does
not hold the agent's stdout) is still a member: :func:`stop_agent` waits for the whole group,
not only for the agent, and the group stays listed with the keeper until it is empty, so a
bridge SIGKILLed during the grace still leaves nothing running.
"""
from __future__ import annotations

import os
import signal
import time

from .cli_process import JsonLinesProcess

__all__ = ["stop_agent", "group_alive", "POLITE_GRACE", "TERM_GRACE"]

POLITE_GRACE = 2.0
"""Seconds an agent has to exit after its stdin closed, before its group gets SIGTERM."""

TERM_GRACE = 2.0
"""Seconds the group has after SIGTERM, before it gets SIGKILL."""

_TICK = 0.05


def group_alive(group: int) -> bool:
    """Whether process group ``group`` has a member that is not a zombie of ours (Linux:
    read from ``/proc``; elsewhere a signal 0 to the group, which counts zombies too)."""
    try:
        names = os.listdir("/proc")
    except OSError:
        try:
            os.killpg(group, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 2 and fields[2] == str(group).encode() and fields[0] != b"Z":
            return True
    return False


def _gone(proc: JsonLinesProcess, seconds: float) -> bool:
    """Wait up to ``seconds`` for the agent and its whole group to end (the agent is reaped
    on the way, without telling the keeper yet)."""
    deadline = time.monotonic() + seconds
    while True:
        proc.proc.poll()
        if not group_alive(proc.proc.pid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(_TICK)


def stop_agent(proc: JsonLinesProcess, polite: float = POLITE_GRACE, term: float = TERM_GRACE) -> int:
    """End the agent ``proc`` and every process of its group: close its stdin and wait up
    to ``polite`` seconds, then SIGTERM the group and wait up to ``term`` seconds, then
    SIGKILL the group. Returns within about ``polite + term + 1`` seconds; idempotent.

    Returns:
        The agent's exit status (negative: the signal that ended it).
    """
    proc.close_stdin()
    if not _gone(proc, polite):
        proc.signal_group(signal.SIGTERM)
        if not _gone(proc, term):
            proc.signal_group(signal.SIGKILL)
            _gone(proc, 1.0)
    code = proc.proc.wait()
    proc.wait(0)  # the group is empty: the keeper may forget it
    proc.close()
    return code

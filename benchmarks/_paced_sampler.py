"""The paced rows' sampler: CPU and voluntary switches of some processes at given moments,
read from a process of its own.

Why a process of its own: the host of a paced row runs 2K+ threads under one GIL, and every
``/proc`` read gives the GIL away; read from the host, one snapshot of 50 streams took 0.9 to
1.9 s (round 7), so its figures belonged to different moments and its windows overlapped the
turns' end (a turn thread that ended took its CPU out of a sum over live threads: negative
CPU per delta). Here nothing competes for this interpreter.

Run as ``python _paced_sampler.py PID...`` (stdlib only, no package import); it prints
``ready``, reads one JSON line on stdin, ``{"at": [CLOCK_MONOTONIC seconds, ...]}``, sleeps
until each moment and snapshots every pid, then prints one JSON list of snapshots on a line of
its own and exits. A snapshot::

    {"due": s, "t": ns, "t_cpu": ns, "t_end": ns, "procs": {"PID": {
        "start": the process's start time (/proc/PID/stat field 22: a reused pid differs),
        "cpu": CPU seconds of the whole process, ended threads included (its CPU clock),
        "ticks": the same from /proc/PID/stat in clock ticks (a check),
        "threads": {"TID": voluntary switches of each live thread},
        "t_end": ns, when its thread reads ended}}}

``t`` is taken just before the CPU clocks are read and ``t_cpu`` just after (CLOCK_MONOTONIC
ns, every process's clock on this machine); the per-thread reads end at ``t_end``. A thread
id is taken as the same thread from one snapshot to the next (Linux hands out ids in turn:
one is reused only after the whole id space, millions, went round).
"""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Dict, List

__all__ = ["snapshot", "process_clock_seconds", "main"]


def process_clock_seconds(pid: int) -> float:
    """CPU seconds used by ``pid`` so far, every thread it had included (the kernel's process
    CPU clock of ``pid``: ``clock_getcpuclockid``'s encoding, CPUCLOCK_SCHED, process-wide)."""
    return time.clock_gettime_ns(((~pid) << 3) | 2) / 1e9


def _stat(path: str) -> List[str]:
    with open(path) as f:
        return f.read().rsplit(")", 1)[1].split()


def _threads(pid: int) -> Dict[str, int]:
    out: Dict[str, int] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status", "rb") as f:
                text = f.read()
        except OSError:  # the thread ended meanwhile: it is not live
            continue
        at = text.find(b"voluntary_ctxt_switches:")
        if at >= 0:
            out[tid] = int(text[at + 24:text.index(b"\n", at)])
    return out


def snapshot(pids: List[int], due: float = 0.0) -> Dict[str, Any]:
    """One snapshot of ``pids`` (see the module docstring)."""
    t = time.monotonic_ns()
    cpu = {pid: process_clock_seconds(pid) for pid in pids}
    t_cpu = time.monotonic_ns()
    tick = os.sysconf("SC_CLK_TCK")
    procs: Dict[str, Any] = {}
    for pid in pids:
        fields = _stat(f"/proc/{pid}/stat")
        threads = _threads(pid)
        ticks = (int(fields[11]) + int(fields[12])) / tick
        procs[str(pid)] = {"start": int(fields[19]), "cpu": cpu[pid], "ticks": ticks, "threads": threads,
                           "t_end": time.monotonic_ns()}
    return {"due": due, "t": t, "t_cpu": t_cpu, "t_end": time.monotonic_ns(), "procs": procs}


def main(argv: List[str]) -> int:
    """The program (see the module docstring)."""
    pids = [int(a) for a in argv]
    print("ready", flush=True)  # started and imported: the streams may go
    at = json.loads(sys.stdin.readline())["at"]
    snaps = []
    for due in at:
        time.sleep(max(0.0, due - time.monotonic()))
        snaps.append(snapshot(pids, due))
    print(json.dumps(snaps), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""One many-cold run in a fresh host process:
``python -m benchmarks._many_cold MODE FOLDER SESSIONS``.

``MODE`` is ``one`` (``SESSIONS`` sessions on one LocalSandbox in ``FOLDER/ws``) or ``many``
(one LocalSandbox each, ``FOLDER/ws-<i>``); ``SESSIONS`` 1 with ``one`` is a lone cold start.
No bridge runs there yet. ``SESSIONS`` threads, released together at a barrier, each call
``create_session`` and ``turn("a")`` and take the first part. Prints one JSON line: seconds
from the release to each first part, and the counts of what the host did to get there:

- ``spawned``: bridge processes started (``python -m bridge_client.bridge``),
- ``template_runs``: ``Template.run`` calls (the template's steps and checks),
- ``execs``: other processes started (the template's checks, each an interpreter start),
- ``bridges_logged``: bridges that wrote to a ``bridge.log`` (``listening on`` for the one that
  won the lock, ``another bridge holds the lock`` for each that lost it): the same count seen
  from the sandbox side;
- ``host_cpu_s``, ``bridge_cpu_s``: CPU seconds up to the end of every turn (releases left
  out) of this process from the release, and of the bridges it reached, their start included;
- ``host_switches``: this process's context switches (voluntary and not, all threads) over the
  same span: each is a thread that blocked or was preempted (under 100 threads, mostly a GIL
  hand-over around a system call).

The counters wrap ``subprocess.Popen`` and ``Template.run`` in this process only (a
LocalSandbox starts every process with ``subprocess.Popen``); the product is not changed. A
fresh process per run: nothing cached by an earlier run helps.
"""

from __future__ import annotations

import glob
import json
import os
import resource
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Sequence

import bridge_client as bc
from bridge_client import template as template_module

from .product import echo_options, session_options

_lock = threading.Lock()
COUNTS = {"spawned": 0, "template_runs": 0, "execs": 0}


def _count(name: str) -> None:
    with _lock:
        COUNTS[name] += 1


class _CountingPopen(subprocess.Popen):  # type: ignore[type-arg]
    """``subprocess.Popen`` that counts what it starts: the bridge program (``-m
    bridge_client.bridge``) as a spawned bridge, anything else (the template's checks and
    installs) as a sandbox exec. Every process a LocalSandbox starts goes through it, whatever
    adapter method the launcher calls (``spawn``, ``spawn_with_notice``, ``exec``...)."""

    def __init__(self, args: Any, *rest: Any, **kw: Any) -> None:
        argv = [str(a) for a in args] if isinstance(args, (list, tuple)) else [str(args)]
        is_bridge = any(a == "-m" and b == BRIDGE_MODULE for a, b in zip(argv, argv[1:]))
        _count("spawned" if is_bridge else "execs")
        super().__init__(args, *rest, **kw)


BRIDGE_MODULE = "bridge_client.bridge"


def _count_processes_and_template_runs() -> None:
    subprocess.Popen = _CountingPopen  # type: ignore[misc]  # this process only
    original = template_module.Template.run

    def run(self: Any, *args: Any, **kw: Any) -> Any:
        _count("template_runs")
        return original(self, *args, **kw)

    template_module.Template.run = run  # type: ignore[method-assign]


def _bridges_logged(sandboxes: Sequence[bc.LocalSandbox]) -> Dict[str, int]:
    won = lost = 0
    for sandbox in sandboxes:
        for path in glob.glob(os.path.join(sandbox.state_root, "bridges", "*", "bridge.log")):
            with open(path, errors="replace") as f:
                text = f.read()
            won += text.count(" listening on ")
            lost += text.count("another bridge holds the lock")
    return {"won_lock": won, "lost_lock": lost}


def run(mode: str, folder: str, n: int) -> Dict[str, Any]:
    """Measure one many-cold run; see the module's docstring."""
    _count_processes_and_template_runs()
    if mode == "one":
        os.makedirs(os.path.join(folder, "ws"))
        sandboxes = [bc.LocalSandbox(os.path.join(folder, "ws"))]
    elif mode == "many":
        for i in range(n):
            os.makedirs(os.path.join(folder, f"ws-{i:03d}"))
        sandboxes = [bc.LocalSandbox(os.path.join(folder, f"ws-{i:03d}")) for i in range(n)]
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    opts = echo_options()
    firsts: List[float] = [0.0] * n
    errors: List[BaseException] = []
    sessions: List[Any] = [None] * n
    start = threading.Barrier(n + 1)
    t0 = [0.0]

    def work(i: int) -> None:
        try:
            start.wait()
            sandbox = sandboxes[i % len(sandboxes)]
            session = sessions[i] = bc.create_session(
                opts, session_options(sandbox, launch_timeout=300.0, resend_window=300.0)
            )
            turn = session.turn("a")
            next(turn)
            firsts[i] = time.perf_counter() - t0[0]
            for _ in turn:
                pass
        except BaseException as exc:  # reported below
            errors.append(exc)
            start.abort()

    threads = [threading.Thread(target=work, args=(i,), name=f"cold-{i}") for i in range(n)]
    for t in threads:
        t.start()
    host0, switches0 = _host_cpu(), _host_switches()
    t0[0] = time.perf_counter()
    start.wait()
    for t in threads:
        t.join()
    # CPU to the end of the turns, releases left out: this process's from the release, and
    # the bridges' whole (their start included; the lone run's figure is the start's share).
    host_cpu = _host_cpu() - host0
    host_switches = _host_switches() - switches0
    bridge_cpu = sum(_proc_cpu(pid) for pid in {s._hello.pid for s in sessions if s is not None and s._hello})
    for s in sessions:
        if s is not None:
            s.release()
    if errors:
        raise errors[0]
    return {
        "mode": mode,
        "sessions": n,
        "first_part_s": firsts,
        "all_first_parts_s": max(firsts),
        "host_cpu_s": host_cpu,
        "host_switches": host_switches,
        "bridge_cpu_s": bridge_cpu,
        **COUNTS,
        "bridges_logged": _settled_logs(sandboxes, COUNTS["spawned"]),
    }


def _host_cpu() -> float:
    t = os.times()
    return t.user + t.system


def _host_switches() -> int:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_nvcsw + usage.ru_nivcsw


def _proc_cpu(pid: int) -> float:
    """Seconds of CPU (user and system, all threads, ended ones included) of process ``pid``
    (``/proc/<pid>/stat``; 0.0 where there is none)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _settled_logs(sandboxes: Sequence[bc.LocalSandbox], spawned: int, wait: float = 10.0) -> Dict[str, int]:
    """:func:`_bridges_logged` once every spawned bridge has said whether it won the lock (a
    loser may still be on its way out, and the winner logs after it writes the listening file
    the host connects by), or after ``wait`` seconds with what was said by then."""
    deadline = time.monotonic() + wait
    while True:
        logged = _bridges_logged(sandboxes)
        if logged["won_lock"] + logged["lost_lock"] >= spawned or time.monotonic() > deadline:
            return logged
        time.sleep(0.05)


def main(argv: List[str]) -> int:
    print(json.dumps(run(argv[0], argv[1], int(argv[2]))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

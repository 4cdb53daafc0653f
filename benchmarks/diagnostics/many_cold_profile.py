"""Where the host's CPU goes when many sessions start cold at once (issue 15, fifth round):
``python -m benchmarks.diagnostics.many_cold_profile [--sessions N] [--runs R] [--yappi]``.

Each run is one :func:`benchmarks._many_cold.run` (``one`` mode: ``N`` threads, one
LocalSandbox, no bridge yet) in a fresh process, with the host's steps on that path wrapped
to add up the CPU time (``time.thread_time``) of the thread that runs them:

- ``create_session``, and inside it ``SessionChannel.connect`` (find or launch, then
  OpenSession), ``launcher.connect``, ``SingleFlight.run`` (the leader's launch, or a
  waiter's wait), ``finder.find``, ``Connection.__init__`` (TCP connect, upgrade, reader
  start), ``Connection.call`` per RPC tag;
- ``Session._begin`` (``turn()`` and its first part: StartTurn and ReadTurn);
- each thread's whole CPU by kind (the ``cold-*`` caller threads, the connections' reader
  threads, any other), from the end of its ``run``.

Steps nest (the figures are inclusive); each is printed as milliseconds per session. The
process's own CPU (``os.times``) from the release is printed next to the sum of the threads'
CPU. With ``--yappi`` (when installed) the run is profiled instead (CPU clock, all threads)
and the 40 functions of most own time are printed: yappi's overhead inflates small calls,
so read it for what is called how often, not for the times.

The product is not changed; only this process's functions are wrapped.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Dict, List

_cpu: Dict[str, float] = collections.defaultdict(float)
_calls: Dict[str, int] = collections.defaultdict(int)
_lock = threading.Lock()


def _add(name: str, seconds: float) -> None:
    with _lock:
        _cpu[name] += seconds
        _calls[name] += 1


def _wrap(owner: Any, attr: str, name: str, per_tag: bool = False) -> None:
    original: Callable[..., Any] = getattr(owner, attr)

    @functools.wraps(original)
    def timed(*args: Any, **kw: Any) -> Any:
        t0 = time.thread_time()
        try:
            return original(*args, **kw)
        finally:
            label = f"{name} {args[1]}" if per_tag and len(args) > 1 else name
            _add(label, time.thread_time() - t0)

    setattr(owner, attr, timed)


def _thread_kind(name: str) -> str:
    for prefix, kind in (
        ("cold-", "threads: cold-* callers"),
        ("bridge-client-reader-", "threads: connection readers"),
    ):
        if name.startswith(prefix):
            return kind
    return f"threads: other ({name.split('-')[0]})"


def _wrap_threads() -> None:
    run = threading.Thread.run

    def timed_run(self: threading.Thread) -> None:
        try:
            run(self)
        finally:
            _add(_thread_kind(self.name), time.thread_time())

    threading.Thread.run = timed_run  # type: ignore[method-assign]


def _instrument() -> None:
    import bridge_client as bc
    from bridge_client.client import channel, connection, flights, launcher, session

    _wrap(bc, "create_session", "create_session")
    _wrap(channel.SessionChannel, "connect", "  SessionChannel.connect")
    _wrap(launcher, "connect", "    launcher.connect")
    _wrap(flights.SingleFlight, "run", "      SingleFlight.run")
    _wrap(launcher, "_find_or_refused", "      finder._find_or_refused (first look)")
    _wrap(launcher, "find", "      finder.find (after the flight)")
    _wrap(connection.Connection, "__init__", "        Connection.__init__")
    _wrap(connection.Connection, "call", "        Connection.call", per_tag=True)
    _wrap(session.Session, "_begin", "Session._begin (turn() to its first part)")
    _wrap_threads()


def one_run(n: int, use_yappi: bool) -> Dict[str, Any]:
    """One run in this process; the figures as a JSON-able dict."""
    from .. import _many_cold

    yappi: Any = None
    if use_yappi:
        import yappi  # type: ignore[no-redef]

        yappi.set_clock_type("cpu")
        yappi.start(builtins=True, profile_threads=True)
    else:
        _instrument()
    folder = tempfile.mkdtemp(prefix="many-cold-profile-")
    result = _many_cold.run("one", folder, n)
    out: Dict[str, Any] = {
        k: result[k] for k in ("all_first_parts_s", "host_cpu_s", "host_switches", "bridge_cpu_s", "spawned")
    }
    if yappi is not None:
        yappi.stop()
        stats = yappi.get_func_stats()
        stats.sort("tsub", "desc")
        out["yappi"] = [
            (
                s.ncall,
                round(s.tsub * 1000, 1),
                round(s.ttot * 1000, 1),
                f"{os.path.basename(s.module)}:{s.lineno} {s.name}",
            )
            for s in list(stats)[:40]
        ]
    else:
        out["cpu_ms"] = {k: v * 1000 for k, v in _cpu.items()}
        out["calls"] = dict(_calls)
    return out


def main(argv: List[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=100)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--yappi", action="store_true")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(one_run(args.sessions, args.yappi)), flush=True)
        return 0
    for _ in range(args.runs):
        cmd = [
            sys.executable,
            "-m",
            "benchmarks.diagnostics.many_cold_profile",
            "--child",
            "--sessions",
            str(args.sessions),
        ]
        if args.yappi:
            cmd.append("--yappi")
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            sys.stderr.write(done.stderr)
            return done.returncode
        r = json.loads(done.stdout.strip().splitlines()[-1])
        n = args.sessions
        host_ms, bridge_ms = r["host_cpu_s"] * 1000, r["bridge_cpu_s"] * 1000
        print(
            f"all first parts {r['all_first_parts_s'] * 1000:.0f} ms, host CPU {host_ms:.0f} ms "
            f"({host_ms / n:.2f} ms/session), {r['host_switches'] / n:.0f} context switches/session, "
            f"bridge CPU {bridge_ms:.0f} ms, load {os.getloadavg()[0]:.1f}"
        )
        if "yappi" in r:
            for ncall, tsub, ttot, name in r["yappi"]:
                print(f"  {ncall:7d} own {tsub:8.1f} ms  total {ttot:8.1f} ms  {name}")
            continue
        threads = sum(v for k, v in r["cpu_ms"].items() if k.startswith("threads:"))
        print(f"  sum of the threads' CPU {threads:.0f} ms (main thread and interpreter start not in it)")
        for name, ms in r["cpu_ms"].items():
            print(f"  {ms / n:7.3f} ms/session  {ms:8.1f} ms  {r['calls'][name]:5d} calls  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""One many-cold run in a fresh host process:
``python -m benchmarks._many_cold MODE FOLDER SESSIONS``.

``MODE`` is ``one`` (``SESSIONS`` sessions on one LocalSandbox in ``FOLDER/ws``) or ``many``
(one LocalSandbox each, ``FOLDER/ws-<i>``); ``SESSIONS`` 1 with ``one`` is a lone cold start.
No bridge runs there yet. ``SESSIONS`` threads, released together at a barrier, each call
``create_session`` and ``turn("a")`` and take the first part. Prints one JSON line: seconds
from the release to each first part, and the counts of what the host did to get there:

- ``spawned``: ``sandbox.spawn`` calls (bridge processes started),
- ``template_runs``: ``Template.run`` calls (the template's steps and checks),
- ``execs``: ``sandbox.exec`` calls (each an interpreter start in the sandbox: the checks),
- ``bridges_logged``: bridges that wrote to a ``bridge.log`` (``listening on`` for the one that
  won the lock, ``another bridge holds the lock`` for each that lost it): the same count seen
  from the sandbox side.

The counters wrap the sandbox adapter's methods and ``Template.run`` in this process only; the
product is not changed. A fresh process per run: nothing cached by an earlier run helps.
"""

from __future__ import annotations

import glob
import json
import os
import sys
import threading
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence

import bridge_client as bc
from bridge_client import template as template_module

from .product import echo_options, session_options

_lock = threading.Lock()
COUNTS = {"spawned": 0, "template_runs": 0, "execs": 0}


def _count(name: str) -> None:
    with _lock:
        COUNTS[name] += 1


class CountingSandbox(bc.LocalSandbox):
    """A LocalSandbox that counts the processes the host starts in it."""

    def exec(
        self,
        argv: Sequence[str],
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
    ) -> Any:
        """:meth:`LocalSandbox.exec`, counted."""
        _count("execs")
        return super().exec(argv, cwd=cwd, env=env, timeout=timeout)

    def spawn(
        self,
        argv: Sequence[str],
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        log_path: Optional[str] = None,
    ) -> Any:
        """:meth:`LocalSandbox.spawn`, counted."""
        _count("spawned")
        return super().spawn(argv, cwd=cwd, env=env, log_path=log_path)


def _count_template_runs() -> None:
    original = template_module.Template.run

    def run(self: Any, sandbox: Any, **kw: Any) -> Any:
        _count("template_runs")
        return original(self, sandbox, **kw)

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
    _count_template_runs()
    if mode == "one":
        os.makedirs(os.path.join(folder, "ws"))
        sandboxes = [CountingSandbox(os.path.join(folder, "ws"))]
    elif mode == "many":
        for i in range(n):
            os.makedirs(os.path.join(folder, f"ws-{i:03d}"))
        sandboxes = [CountingSandbox(os.path.join(folder, f"ws-{i:03d}")) for i in range(n)]
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
    t0[0] = time.perf_counter()
    start.wait()
    for t in threads:
        t.join()
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
        **COUNTS,
        "bridges_logged": _bridges_logged(sandboxes),
    }


def main(argv: List[str]) -> int:
    print(json.dumps(run(argv[0], argv[1], int(argv[2]))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

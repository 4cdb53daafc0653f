"""Issue 15's cold-start rows.

- :func:`many_cold`: ``sizes.many_sessions`` sessions created at once from as many threads,
  with no bridge yet, on one LocalSandbox and on one LocalSandbox each; wall time from the
  release to the last first part, bridges spawned, template runs, next to one lone cold start
  in the same run; each run in a fresh host process (:mod:`benchmarks._many_cold`), the
  spread over ``sizes.many_runs`` runs.
- :func:`wheel_cold_start`: a cold start from this package built as a wheel (``pip wheel .
  --no-deps``) and installed in a fresh venv (dependencies from pip's cache, ``.pyc``
  compiled by pip), next to the floor measured in the same run, with that venv's interpreter
  (interpreter start plus the modules the bridge program imports before it serves), and to the
  cold start of the install this benchmark runs from (editable in the dev setup).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List, Sequence

from ._common import BenchEnv, Row, Sizes, figure, python_subprocess, time_ratio

__all__ = ["many_cold", "wheel_cold_start", "cold_details", "FLOOR_IMPORTS", "build_wheel_venv"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FLOOR_IMPORTS = (
    "bridge_client.bridge.__main__",
    "bridge_client.bridge.recovery",
    "bridge_client.bridge.server",
    "bridge_client.bridge.store",
    "bridge_client.bridge.turns",
    "bridge_client.drivers.echo",
)
"""What the bridge program (``python -m bridge_client.bridge --driver echo``) imports before it
serves: its main module, then what ``_Bridge`` imports (store, recovery, turns, server), and
the driver."""


# ----------------------------------------------------------------------------- many at once


def _many_once(env: BenchEnv, mode: str, n: int) -> Dict[str, Any]:
    folder = env.workspace(f"many-{mode}-{n}")
    proc = python_subprocess(["-m", "benchmarks._many_cold", mode, folder, str(n)])
    try:
        out, _ = proc.communicate(timeout=900)
    finally:
        env.stop_bridges(folder)
    if proc.returncode != 0:
        raise RuntimeError(f"many-cold run ({mode}, {n} sessions) failed (exit {proc.returncode})")
    result: Dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def many_cold(env: BenchEnv, sizes: Sizes) -> List[Row]:
    """Two rows: ``sizes.many_sessions`` cold sessions at once on one sandbox, and on as many
    sandboxes, each against a lone cold start; runs alternate lone / one / many. With
    ``sizes.many_one_only`` the first row alone (lone / one)."""
    n = sizes.many_sessions
    lone: List[Dict[str, Any]] = []
    one: List[Dict[str, Any]] = []
    many: List[Dict[str, Any]] = []
    for _ in range(sizes.many_runs):
        lone.append(_many_once(env, "one", 1))
        one.append(_many_once(env, "one", n))
        if not sizes.many_one_only:
            many.append(_many_once(env, "many", n))
    single = figure(
        "one lone cold start (create_session to first part, fresh host process)",
        "ms",
        [r["all_first_parts_s"] * 1000 for r in lone],
    )
    rows = []
    for label, runs, what in (
        ("one sandbox", one, "on one sandbox"),
        ("many sandboxes", many, "one sandbox each"),
    ):
        if not runs:
            continue
        product = figure(
            f"{n} sessions created at once from {n} threads, {what}, no bridge yet: "
            "release to the last first part",
            "ms",
            [r["all_first_parts_s"] * 1000 for r in runs],
        )
        ratio = time_ratio(product, single)
        spawned = [r["spawned"] for r in runs]
        extra = {
            "sessions": n,
            "runs": runs,
            "lone_runs": lone,
            "spawned": spawned,
            "template_runs": [r["template_runs"] for r in runs],
            "execs": [r["execs"] for r in runs],
            "bridges_logged": [r["bridges_logged"] for r in runs],
            "median_first_part_ms": [statistics.median(r["first_part_s"]) * 1000 for r in runs],
            # CPU per session past the lone cold start's (its bridge start, its one session)
            "host_cpu_per_session_ms": _per_session_cpu(runs, lone, "host_cpu_s", n),
            "bridge_cpu_per_session_ms": _per_session_cpu(runs, lone, "bridge_cpu_s", n),
            "lone_spawned": [r["spawned"] for r in lone],
            "lone_template_runs": [r["template_runs"] for r in lone],
            "lone_execs": [r["execs"] for r in lone],
        }
        if label == "one sandbox":
            target = "all first parts within 2x one cold start (ratio >= 0.5), exactly 1 bridge spawned"
            met = ratio >= 0.5 and all(s == 1 for s in spawned)
        else:
            target = f"(none set; {n} bridges must start: reported)"
            met = None
        rows.append(
            Row(
                f"many-cold, {label}",
                product,
                single,
                ratio,
                "lone cold start / all first parts",
                target,
                met,
                extra=extra,
            )
        )
    return rows


def _per_session_cpu(
    runs: Sequence[Dict[str, Any]], lone: Sequence[Dict[str, Any]], key: str, n: int
) -> float:
    """Median CPU milliseconds per session beyond the first: (a run's CPU less the median lone
    cold start's) / (n - 1); 0.0 when a run has no such figure."""
    if n < 2 or not all(key in r for r in list(runs) + list(lone)):
        return 0.0
    base = statistics.median(r[key] for r in lone)
    return float(statistics.median((r[key] - base) * 1000 / (n - 1) for r in runs))


# ----------------------------------------------------------------------------- wheel install


def build_wheel_venv(folder: str) -> str:
    """Build this source tree as a wheel (``pip wheel . --no-deps``) and install it with the
    ``bridge`` extra in a new venv under ``folder``; return the venv's interpreter.

    Raises:
        RuntimeError: the build or the install failed (with pip's last output).
    """
    wheels = os.path.join(folder, "wheel")
    venv = os.path.join(folder, "venv")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def run(argv: Sequence[str], what: str) -> None:
        done = subprocess.run(list(argv), capture_output=True, text=True, env=env, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(
                f"{what} failed (exit {done.returncode}): {(done.stdout + done.stderr)[-800:]}"
            )

    run(
        [sys.executable, "-m", "pip", "wheel", ROOT, "--no-deps", "-q", "-w", wheels], "pip wheel . --no-deps"
    )
    (wheel,) = [os.path.join(wheels, w) for w in os.listdir(wheels) if w.endswith(".whl")]
    run([sys.executable, "-m", "venv", venv], "python -m venv")
    python = os.path.join(venv, "bin", "python")
    run([python, "-m", "pip", "install", "-q", f"{wheel}[bridge]"], "pip install the wheel")
    return python


def _clean_env() -> Dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def _floor_once(python: str) -> float:
    """Seconds to start ``python`` and import :data:`FLOOR_IMPORTS`."""
    t0 = time.perf_counter()
    subprocess.run(
        [python, "-c", "import " + ", ".join(FLOOR_IMPORTS)], check=True, env=_clean_env(), timeout=120
    )
    return time.perf_counter() - t0


def _cold_once(env: BenchEnv, python: str, label: str) -> Dict[str, Any]:
    """One cold start run by ``python`` (its own install) in a fresh folder (see _cold_once.py)."""
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_cold_once.py")) as f:
        source = f.read()
    folder = env.workspace(f"wheel-{label}")
    try:
        done = subprocess.run(
            [python, "-c", source, folder],
            capture_output=True,
            text=True,
            env=_clean_env(),
            cwd=folder,
            timeout=300,
        )
    finally:
        env.stop_bridges(folder)
    if done.returncode != 0:
        raise RuntimeError(f"cold start with {python} failed (exit {done.returncode}): {done.stderr[-800:]}")
    result: Dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def wheel_cold_start(env: BenchEnv, sizes: Sizes) -> Row:
    """A cold start from the wheel in a fresh venv, against the floor (same venv, same run);
    the cold start of this benchmark's own install beside them. The three alternate."""
    t0 = time.perf_counter()
    python = build_wheel_venv(env.workspace("wheel-build"))
    build_s = time.perf_counter() - t0
    floors: List[float] = []
    wheel: List[Dict[str, Any]] = []
    own: List[Dict[str, Any]] = []
    _floor_once(python)  # the first start after the install reads every file cold from disk
    for i in range(sizes.wheel_runs):
        floors.append(_floor_once(python) * 1000)
        wheel.append(_cold_once(env, python, f"venv{i}"))
        own.append(_cold_once(env, sys.executable, f"own{i}"))
    venv_root = os.path.dirname(os.path.dirname(python))
    if not all(r["module"].startswith(venv_root) for r in wheel):
        raise RuntimeError(f"the venv's cold start imported bridge_client from {wheel[0]['module']}")
    product = figure(
        "cold start (create_session to first part) from the wheel in a fresh venv",
        "ms",
        [r["seconds"] * 1000 for r in wheel],
    )
    floor = figure(f"floor: venv python -c 'import {', '.join(FLOOR_IMPORTS)}'", "ms", floors)
    own_ms = [r["seconds"] * 1000 for r in own]
    ratio = time_ratio(product, floor)
    return Row(
        "wheel cold start",
        product,
        floor,
        ratio,
        "floor / cold start",
        "<= 1.5x the floor (ratio >= 0.67)",
        ratio >= 1 / 1.5,
        extra={
            "own_install_cold_start_ms": own_ms,
            "own_install_cold_start_median_ms": statistics.median(own_ms),
            "own_install_module": own[0]["module"],
            "own_install_editable": own[0]["module"].startswith(os.path.join(ROOT, "bridge_client")),
            "venv_module": wheel[0]["module"],
            "build_and_install_s": build_s,
        },
    )


def cold_details(rows: Sequence[Row]) -> List[str]:
    """The detail lines of the many-cold and wheel cold-start rows."""
    out = []
    for r in rows:
        if r.name.startswith("many-cold") and r.extra:
            per_run = ", ".join(f"{ms:.0f}" for ms in (r.product.samples if r.product else []))
            out.append(
                f"{r.name} ({r.extra['sessions']} sessions): all first parts per run {per_run} ms; bridges "
                f"spawned {r.extra['spawned']}, template runs {r.extra['template_runs']}, sandbox execs "
                f"{r.extra['execs']}, bridges in bridge.log {r.extra['bridges_logged']}; median first part "
                f"per run {', '.join(f'{x:.0f}' for x in r.extra['median_first_part_ms'])} ms; lone cold "
                f"start: spawned {r.extra['lone_spawned']}, template runs {r.extra['lone_template_runs']}; "
                f"CPU per session past the lone cold start's: host "
                f"{r.extra.get('host_cpu_per_session_ms', 0.0):.2f} ms, bridges "
                f"{r.extra.get('bridge_cpu_per_session_ms', 0.0):.2f} ms"
            )
        if r.name == "wheel cold start" and r.extra:
            kind = "editable" if r.extra["own_install_editable"] else "installed"
            out.append(
                f"wheel cold start: this benchmark's own ({kind}) install "
                f"{r.extra['own_install_cold_start_median_ms']:.0f} ms "
                f"({', '.join(f'{x:.0f}' for x in r.extra['own_install_cold_start_ms'])}); wheel build and "
                f"venv install {r.extra['build_and_install_s']:.1f} s"
            )
    return out

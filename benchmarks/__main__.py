"""``python -m benchmarks``: run the benchmarks, print the table, write JSON.

Usage (from the repository root)::

    python -m benchmarks                       # the full run (a few minutes on 2 cores)
    python -m benchmarks --quick               # about a tenth of it, for a look
    python -m benchmarks --only throughput latency --repeats 5
    python -m benchmarks --parts 300000 --sessions 50,100,200 --json out.json

Absolute figures vary on a shared machine; the ratios to the baselines measured in the same
run are the figures that count. See ``docs/performance.md``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from . import NAMES
from ._common import BenchEnv, Figure, Row, Sizes, machine

DEFAULT_JSON = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "latest.json")


def _int_list(text: str) -> List[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError("session counts must be integers >= 1")
    return values


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="about a tenth of the full sizes")
    size.add_argument("--tiny", action="store_true", help="each benchmark once at a tiny size (smoke test)")
    p.add_argument("--only", nargs="+", choices=NAMES, metavar="NAME",
                   help=f"run only these: {', '.join(NAMES)}")
    p.add_argument("--repeats", type=_positive, help="runs of the throughput and replay measurements")
    p.add_argument("--parts", type=_positive, help="text deltas of the throughput turn")
    p.add_argument("--replay-parts", type=_positive, help="parts of the replayed turn")
    p.add_argument("--turns", type=_positive, help="turns of the latency benchmark")
    p.add_argument("--cold-runs", type=_positive, help="cold starts")
    p.add_argument("--resumes", type=_positive, help="connection drops of the resume benchmark")
    p.add_argument("--recoveries", type=_positive, help="bridge kills of the recovery benchmark")
    p.add_argument("--sessions", type=_int_list,
                   help="session counts of the scale benchmark, e.g. 50,100,200")
    p.add_argument("--scale-parts", type=_positive, help="text deltas per session in the scale benchmark")
    p.add_argument("--commands", type=_positive, help="commands per side in the SWE-ReX comparison")
    p.add_argument("--paced-streams", type=_int_list, help="stream counts of the paced rows, e.g. 1,10,50")
    p.add_argument("--paced-deltas", type=_positive, help="deltas of one paced stream (K=1)")
    p.add_argument("--paced-normal", action="store_true", default=None,
                   help="paced and latency rows: also run the bridge with --synchronous NORMAL, after the "
                        "default FULL and the baseline, and give its figures in the detail line")
    p.add_argument("--many-sessions", type=_positive, help="sessions created at once in the many-cold rows")
    p.add_argument("--many-runs", type=_positive, help="runs of each many-cold row")
    p.add_argument("--many-one-only", action="store_true",
                   help="many-cold: only the one-sandbox row (no run that starts a bridge per session)")
    p.add_argument("--json", default=DEFAULT_JSON,
                   help=f"where to write the results (default {DEFAULT_JSON})")
    return p.parse_args(argv)


def sizes_from(args: argparse.Namespace) -> Sizes:
    """The sizes the arguments ask for."""
    base = Sizes.tiny() if args.tiny else Sizes.quick() if args.quick else Sizes()
    overrides: Dict[str, Any] = {}
    for name in ("repeats", "parts", "replay_parts", "turns", "cold_runs", "resumes", "recoveries",
                 "sessions", "scale_parts", "commands", "paced_streams", "paced_deltas", "many_sessions",
                 "many_runs", "paced_normal"):
        value = getattr(args, name)
        if value is not None:
            overrides[name] = tuple(value) if name in ("sessions", "paced_streams") else value
    if args.many_one_only:
        overrides["many_one_only"] = True
    return dataclasses.replace(base, **overrides)


def _num(value: float) -> str:
    if value != value:  # NaN
        return "nan"
    if abs(value) >= 10_000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _cell(f: Optional[Figure]) -> str:
    if f is None:
        return "-"
    label = "p1-p99" if f.spread == "p1-p99" else ""
    spread = f"{_num(f.low)}-{_num(f.high)}{' ' + label if label else ''}"
    return f"{_num(f.median)} {f.unit} ({spread}, n={len(f.samples)})"


def table(rows: Sequence[Row]) -> str:
    """The rows as a Markdown table: median (spread, samples), baseline, ratio, target, met."""
    head = ["benchmark", "product: median (spread, n)", "baseline: median (spread, n)", "ratio", "target",
            "met"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if r.skipped and r.baseline is None:
            baseline = r.skipped
        else:
            baseline = _cell(r.baseline)
        ratio = f"{r.ratio:.2f} ({r.ratio_means})" if r.ratio is not None else "-"
        met = "-" if r.met is None else ("yes" if r.met else "NO")
        lines.append(f"| {r.name} | {_cell(r.product)} | {baseline} | {ratio} | {r.target} | {met} |")
    return "\n".join(lines)


def details(rows: Sequence[Row]) -> str:
    """Extra figures (p99, per-size scale results) as indented lines."""
    out = []
    for r in rows:
        if r.name == "latency" and r.extra:
            out.append(f"latency p99: product {_num(r.extra['product_p99_ms'])} ms, "
                       f"raw round trip {_num(r.extra['baseline_p99_ms'])} ms")
            if "new_session_first_part_p50_ms" in r.extra:
                out.append("latency, a new session on the warm bridge (create_session to first text part): "
                           f"p50 "
                           f"{_num(r.extra['new_session_first_part_p50_ms'])} ms "
                           f"(n={len(r.extra['new_session_first_part_ms'])})")
            if "commit_floor_ms" in r.extra:
                out.append("latency floor: one synchronous=FULL SQLite commit in the same folder "
                           f"{_num(r.extra['commit_floor_ms'])} ms + the round trip = "
                           f"{_num(r.extra['floor_ms'])} ms")
            if "normal_p50_ms" in r.extra:
                out.append("latency with --synchronous NORMAL (same run): p50 "
                           f"{_num(r.extra['normal_p50_ms'])} ms, p99 {_num(r.extra['normal_p99_ms'])} ms")
        if r.name == "throughput" and r.extra.get("paired_ratios"):
            pairs = ", ".join(f"{x:.3f}" for x in r.extra["paired_ratios"])
            out.append(f"throughput / transport limit, run by run (alternating): {pairs}")
        if r.name == "throughput" and "host_cpu_us_per_part" in r.extra:
            out.append(f"throughput CPU per part: host {r.extra['host_cpu_us_per_part']:.2f} us, "
                       f"bridge {r.extra['bridge_cpu_us_per_part']:.2f} us")
        if r.name == "replay" and "ratio_to_throughput_benchmark" in r.extra:
            out.append(f"replay / throughput benchmark: {r.extra['ratio_to_throughput_benchmark']:.2f}")
        if r.name == "scale":
            for s in r.extra.get("by_sessions", []):
                out.append(
                    f"scale {s['sessions']:>4} sessions: {_num(s['parts_per_s'])} parts/s total, "
                    f"host threads {s['host_threads_peak']} (base {s['host_threads_base']}, "
                    f"{s['product_threads_per_session']:.2f} per session + 1 benchmark worker), "
                    f"host RSS {s['host_rss_peak_bytes'] / 2**20:.1f} MiB "
                    f"(base {s['host_rss_base_bytes'] / 2**20:.1f}), "
                    f"{s['rss_per_session_bytes'] / 2**10:.0f} KiB per session"
                )
        if r.name.startswith("warm-agent") and "first_turn_ms" in r.extra:
            first = _num(r.extra["first_turn_ms"])
            out.append(f"{r.name}: the session's first turn (the agent starts) {first} ms")
        if r.skipped:
            out.append(f"{r.name}: {r.skipped}")
    out.extend(issue15_details(rows))
    return "\n".join(out)


def run(names: Sequence[str], sizes: Sizes, log: Callable[[str], None] = print) -> List[Row]:
    """Run the named benchmarks in the issue's order and return their rows (a benchmark that
    fails gives a row whose ``skipped`` says ``failed: ...``)."""
    rows: List[Row] = []
    done: Dict[str, Row] = {}
    with BenchEnv() as env:
        for name in NAMES:
            if name not in names:
                continue
            log(f"running {name} ...")
            t0 = time.monotonic()
            try:
                got = _one(name, env, sizes, done)
            except Exception as exc:  # one broken benchmark must not lose the others' figures
                log(f"  {name} failed: {type(exc).__name__}: {exc}")
                got = Row(name, None, skipped=f"failed: {type(exc).__name__}: {exc}"[:300])
            log(f"  {name}: {time.monotonic() - t0:.1f} s")
            some = got if isinstance(got, list) else [got]
            done[name] = some[0]
            rows.extend(some)
    return rows


def issue15_details(rows: Sequence[Row]) -> List[str]:
    """The detail lines of issue 15's rows."""
    from .cold import cold_details
    from .paced import paced_details

    return paced_details(rows) + cold_details(rows)


def _one(name: str, env: BenchEnv, sizes: Sizes, done: Dict[str, Row]) -> Union[Row, List[Row]]:
    """Run the benchmark ``name`` (one row, or several: ``paced``, ``many-cold``); ``done``
    holds the (first) rows of those already run."""
    from . import cold, paced, peer, product

    def product_of(other: str) -> Optional[Figure]:
        row = done.get(other)
        return row.product if row is not None else None

    if name == "throughput":
        return product.throughput(env, sizes)
    if name == "per-part":
        return paced.per_part(env, sizes)
    if name == "paced":
        return paced.paced(env, sizes)
    if name == "wheel-cold-start":
        return cold.wheel_cold_start(env, sizes)
    if name == "many-cold":
        return cold.many_cold(env, sizes)
    if name == "replay":
        return product.replay(env, sizes, product_of("throughput"))
    if name == "latency":
        return product.latency(env, sizes)
    if name == "cold-start":
        return product.cold_start(env, sizes)
    if name == "resume":
        return product.resume(env, sizes)
    if name == "recovery":
        return product.recovery(env, sizes, product_of("cold-start"))
    if name == "scale":
        return product.scale(env, sizes, product_of("throughput"))
    if name == "durability":
        from .durability import durability

        return durability(env, sizes)
    if name == "warm-agent":
        from .warm_agents import warm_agents

        return warm_agents(env, sizes)
    return peer.swe_rex(env, sizes)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    sizes = sizes_from(args)
    names = list(args.only or NAMES)
    info = machine()
    started = time.time()
    rows = run(names, sizes, log=lambda s: print(s, file=sys.stderr, flush=True))
    print(table(rows))
    extra = details(rows)
    if extra:
        print()
        print(extra)
    print(f"\nmachine: {info['cpu']}, {info['cores']} cores, {info['python']}, {info['os']}")
    result = {
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "seconds": round(time.time() - started, 1),
        "machine": info,
        "sizes": dataclasses.asdict(sizes),
        "rows": [r.to_json() for r in rows],
    }
    folder = os.path.dirname(os.path.abspath(args.json))
    os.makedirs(folder, exist_ok=True)
    tmp = args.json + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    os.replace(tmp, args.json)  # never a half-written file
    print(f"results written to {args.json}")
    return 1 if any(r.skipped and r.skipped.startswith("failed:") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())

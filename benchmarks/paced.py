"""Issue 15's rows for the path model drivers use: one ``ctx.text`` call per delta.

- :func:`paced`: K streams (1, 10, 50) of 4-character deltas at 200 deltas/s each into one
  bridge, from K host threads; per delta: CPU of the bridge and of the host, voluntary context
  switches of each, emit-to-yield latency. Baseline in the same run: the same K streams as
  raw websockets frames (one text-delta Chunk each) from a plain server thread per
  connection, each acked by a plain websocket-client reader.
- :func:`per_part`: the same driver unpaced (one ``ctx.text`` per 1-character delta, as fast
  as it goes), parts/s and CPU per part, next to the transport limit of benchmark 1.

The driver is :mod:`benchmarks._paced_driver`; the bridge imports it from the repository root,
put on its ``PYTHONPATH`` for these rows only.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import resource
import statistics
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Sequence, Tuple

import bridge_client as bc

from ._common import (
    BenchEnv,
    Row,
    Sizes,
    figure,
    percentile,
    process_cpu_seconds,
    rate_ratio,
    thread_cpu_seconds,
    time_ratio,
    voluntary_switches,
)
from ._paced_driver import AGENT_ID
from .product import BATCH, TRANSPORT_WHAT, BaselineServer, raw_client, session_options, transport_once, warm

__all__ = ["paced", "per_part", "paced_options", "stream_deltas", "importable_benchmarks"]

DRIVER = "benchmarks._paced_driver:make_driver"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUB_WINDOWS = 5
"""The steady part of a paced run (15% to 85% of its nominal length) is cut in this many
windows; each gives one sample of every per-delta figure (median and spread of the row)."""


@contextlib.contextmanager
def importable_benchmarks() -> Iterator[None]:
    """Put the repository root on ``PYTHONPATH`` while the block runs, so that a bridge
    launched meanwhile (it inherits this environment in a LocalSandbox) imports the driver."""
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = ROOT + (os.pathsep + saved if saved else "")
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def paced_options(synchronous: str = "", driver: str = DRIVER) -> bc.BridgeOptions:
    """Options of this package's bridge with the paced benchmark driver (or ``driver``, one
    that streams the same way); ``synchronous`` (``FULL`` or ``NORMAL``) is given to the
    bridge as ``--synchronous`` (default: none, FULL)."""
    options = bc.bridge_options(driver, agent_id=AGENT_ID, bridge_idle_timeout=60.0)
    if synchronous:
        options = dataclasses.replace(options, args=options.args + ("--synchronous", synchronous))
    return options


def stream_deltas(sizes: Sizes, k: int) -> int:
    """Deltas per stream with ``k`` streams: ``sizes.paced_deltas`` for one stream, fewer for
    more (at least a fifth of it), so that a run stays a few seconds long."""
    return min(sizes.paced_deltas, max(sizes.paced_deltas * 4 // k, sizes.paced_deltas // 5))


# ----------------------------------------------------------------------------- measuring


class _Snap:
    """CPU seconds and voluntary context switches of the host (this process, getrusage) and
    of the other process (``pid``, /proc), and the deltas the host had received."""

    def __init__(self, pid: int, received: int) -> None:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        self.host_cpu = ru.ru_utime + ru.ru_stime
        self.host_vcsw = ru.ru_nvcsw
        self.other_cpu = thread_cpu_seconds(pid)  # ns-exact; the threads that matter live on
        self.other_ticks = process_cpu_seconds(pid)  # whole process, 10 ms ticks: a check
        self.other_vcsw = voluntary_switches(pid)
        self.received = received


def _per_delta(a: _Snap, b: _Snap) -> Dict[str, float]:
    n = max(b.received - a.received, 1)
    return {
        "deltas": b.received - a.received,
        "other_cpu_us": (b.other_cpu - a.other_cpu) / n * 1e6,
        "other_cpu_ticks_us": (b.other_ticks - a.other_ticks) / n * 1e6,
        "host_cpu_us": (b.host_cpu - a.host_cpu) / n * 1e6,
        "other_vcsw": (b.other_vcsw - a.other_vcsw) / n,
        "host_vcsw": (b.host_vcsw - a.host_vcsw) / n,
    }


def _run_streams(
    k: int, duration: float, pid: int, stream: Callable[[int, List[int]], List[Tuple[int, float]]]
) -> Tuple[List[Dict[str, float]], List[float], List[float]]:
    """Run ``stream(i, counts)`` in ``k`` threads released together; each counts its deltas in
    ``counts[i]`` and returns its deltas' (emit time in monotonic ns, emit-to-yield latency in
    ms). While they run, the steady part (15% to 85% of ``duration``, the nominal length) is
    measured in :data:`SUB_WINDOWS` windows.

    Returns:
        The per-delta figures of each window, every latency of every stream, and the latencies
        of the deltas emitted in the steady part (no start-up burst).
    """
    counts = [0] * k
    latencies: List[Tuple[int, float]] = []
    errors: List[BaseException] = []
    start = threading.Barrier(k + 1)

    def work(i: int) -> None:
        try:
            start.wait()
            latencies.extend(stream(i, counts))
        except BaseException as exc:  # reported below
            errors.append(exc)
            start.abort()

    threads = [threading.Thread(target=work, args=(i,), name=f"paced-{i}") for i in range(k)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.monotonic()
    steady = (int((t0 + 0.15 * duration) * 1e9), int((t0 + 0.85 * duration) * 1e9))
    snaps: List[_Snap] = []
    for j in range(SUB_WINDOWS + 1):
        due = t0 + duration * (0.15 + 0.70 * j / SUB_WINDOWS)
        time.sleep(max(0.0, due - time.monotonic()))
        snaps.append(_Snap(pid, sum(counts)))
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    windows = [_per_delta(a, b) for a, b in zip(snaps, snaps[1:])]
    in_steady = [ms for emitted, ms in latencies if steady[0] <= emitted < steady[1]]
    return windows, [ms for _, ms in latencies], in_steady or [ms for _, ms in latencies]


def _latencies(yields: List[int], emits: Any, what: str) -> List[Tuple[int, float]]:
    if not isinstance(emits, list) or len(emits) != len(yields):
        raise RuntimeError(f"{what}: {len(yields)} deltas but {len(emits or [])} emit times")
    return [(e, (y - e) / 1e6) for y, e in zip(yields, emits)]


def product_paced(env: BenchEnv, k: int, n: int, rate: float, synchronous: str = "") -> Dict[str, Any]:
    """``k`` sessions on one bridge, each streaming ``n`` paced deltas (see the module);
    ``synchronous``: the bridge's ``--synchronous`` (default: its own, FULL)."""
    ws = env.workspace(f"paced{k}{synchronous.lower()}")
    sandbox = bc.LocalSandbox(ws)
    prompt = json.dumps({"n": n, "rate": rate, "text": "abcd", "stamp": True})
    with importable_benchmarks():
        options = paced_options(synchronous)
        sessions = [bc.create_session(options, session_options(sandbox, resend_window=60.0))
                    for _ in range(k)]
        try:
            for s in sessions:
                warm(s)
            hello = sessions[0]._hello
            assert hello is not None
            # Warm the bridge's and the host's code paths once before measuring.
            sum(1 for _ in sessions[0].turn(json.dumps({"n": 50, "rate": 0})))

            def stream(i: int, counts: List[int]) -> List[Tuple[int, float]]:
                yields: List[int] = []
                emits: Any = None
                now = time.monotonic_ns
                for part in sessions[i].turn(prompt):
                    if isinstance(part, bc.TextDelta):
                        yields.append(now())
                        counts[i] += 1
                    elif isinstance(part, bc.Data) and part.name == "emit-ns":
                        emits = part.data
                return _latencies(yields, emits, "paced product stream")

            windows, lat, steady = _run_streams(k, n / rate, hello.pid, stream)
        finally:
            for s in sessions:
                s.release()
    env.stop_bridges(ws)
    return {"windows": windows, "latencies_ms": lat, "steady_latencies_ms": steady}


def baseline_paced(k: int, n: int, rate: float) -> Dict[str, Any]:
    """The same ``k`` streams as raw websockets frames plus acks (see the module)."""
    spec = json.dumps({"n": n, "rate": rate, "text": "abcd"})
    ack = '{"_tag":"Ack","requestId":"2"}'
    with BaselineServer("paced") as server:
        clients = [raw_client(server.url) for _ in range(k)]
        try:

            def stream(i: int, counts: List[int]) -> List[Tuple[int, float]]:
                ws = clients[i]
                yields: List[int] = []
                now = time.monotonic_ns
                ws.send(spec)
                while True:
                    message = json.loads(ws.recv())
                    if message["_tag"] == "Exit":
                        ws.send(ack)
                        return _latencies(yields, message["emit_ns"], "paced baseline stream")
                    yields.append(now())
                    counts[i] += len(message["values"])
                    ws.send(ack)

            windows, lat, steady = _run_streams(k, n / rate, server.pid, stream)
        finally:
            for c in clients:
                c.close()
    return {"windows": windows, "latencies_ms": lat, "steady_latencies_ms": steady}


def _summary(run: Dict[str, Any]) -> Dict[str, float]:
    w = run["windows"]
    lat = run["latencies_ms"]
    return {
        "cpu_us_per_delta": statistics.median(x["other_cpu_us"] for x in w),
        # the whole process by /proc/<pid>/stat over the whole window (threads that ended too)
        "cpu_us_per_delta_proc_stat": sum(x["other_cpu_ticks_us"] * x["deltas"] for x in w)
        / max(sum(x["deltas"] for x in w), 1),
        "host_cpu_us_per_delta": statistics.median(x["host_cpu_us"] for x in w),
        "vcsw_per_delta": statistics.median(x["other_vcsw"] for x in w),
        "host_vcsw_per_delta": statistics.median(x["host_vcsw"] for x in w),
        "p50_ms": percentile(lat, 50),
        "p99_ms": percentile(lat, 99),
        "steady_p50_ms": percentile(run["steady_latencies_ms"], 50),
        "steady_p99_ms": percentile(run["steady_latencies_ms"], 99),
        "deltas_measured": sum(x["deltas"] for x in w),
    }


def paced(env: BenchEnv, sizes: Sizes) -> List[Row]:
    """One row per stream count in ``sizes.paced_streams``: bridge CPU per paced delta against
    the raw websockets frame plus ack at the same pace (see the module docstring)."""
    rows = []
    rate = float(sizes.paced_rate)
    for k in sizes.paced_streams:
        n = stream_deltas(sizes, k)
        product = product_paced(env, k, n, rate)
        baseline = baseline_paced(k, n, rate)
        mine, theirs = _summary(product), _summary(baseline)
        normal = _summary(product_paced(env, k, n, rate, "NORMAL")) if sizes.paced_normal else None
        pf = figure(f"{k} x {n} deltas of 4 chars at {rate:g}/s, one ctx.text each: bridge CPU", "us/delta",
                    [x["other_cpu_us"] for x in product["windows"]])
        bf = figure(f"{k} x {n} raw websockets frames + ack at {rate:g}/s: server CPU", "us/frame",
                    [x["other_cpu_us"] for x in baseline["windows"]])
        ratio = time_ratio(pf, bf)
        target = "bridge CPU <= 1.3x the baseline's (ratio >= 0.77)"
        met = ratio >= 1 / 1.3
        if k >= 50:
            target += " and p99 emit-to-yield < 20 ms"
            met = met and mine["p99_ms"] < 20.0
        rows.append(Row(
            f"paced K={k}",
            pf,
            bf,
            ratio,
            "baseline CPU / bridge CPU per delta",
            target,
            met,
            extra={"streams": k, "deltas_per_stream": n, "rate_per_stream": rate, "product": mine,
                   "baseline": theirs, "normal": normal, "product_windows": product["windows"],
                   "baseline_windows": baseline["windows"]},
        ))
    return rows


# ----------------------------------------------------------------------------- per-part path


def per_part(env: BenchEnv, sizes: Sizes) -> Row:
    """One turn of ``sizes.parts`` 1-character deltas, one ``ctx.text`` each, no pacing, read by
    a Session iterator; against the transport limit (benchmark 1's baseline), alternating."""
    ws = env.workspace("per-part")
    sandbox = bc.LocalSandbox(ws)
    prompt = json.dumps({"n": sizes.parts, "rate": 0, "text": "y"})
    samples: List[float] = []
    limits: List[float] = []
    host_cpu: List[float] = []
    bridge_cpu: List[float] = []
    with importable_benchmarks(), \
            bc.create_session(paced_options(), session_options(sandbox)) as session, \
            BaselineServer("chunks", str(sizes.parts), str(BATCH)) as server:
        warm(session)
        assert session._hello is not None
        pid = session._hello.pid
        sum(1 for _ in session.turn(json.dumps({"n": 1000, "rate": 0, "text": "y"})))
        for _ in range(sizes.repeats):
            b0, h0 = process_cpu_seconds(pid), time.process_time()
            t0 = time.perf_counter()
            count = sum(1 for _ in session.turn(prompt))
            samples.append(count / (time.perf_counter() - t0))
            host_cpu.append((time.process_time() - h0) / count * 1e6)
            bridge_cpu.append((process_cpu_seconds(pid) - b0) / count * 1e6)
            limits.append(transport_once(server.url, sizes.parts))
    env.stop_bridges(ws)
    product = figure(f"turn of {sizes.parts} 1-char deltas, one ctx.text each, Session iterator", "parts/s",
                     samples)
    baseline = figure(TRANSPORT_WHAT, "parts/s", limits)
    ratio = rate_ratio(product, baseline)
    host = statistics.median(host_cpu)
    return Row(
        "per-part",
        product,
        baseline,
        ratio,
        "product / transport limit",
        ">= 0.5 of the transport limit and host CPU <= 2.0 us/part",
        ratio >= 0.5 and host <= 2.0,
        extra={
            "paired_ratios": [a / b for a, b in zip(samples, limits)],
            "host_cpu_us_per_part": host,
            "bridge_cpu_us_per_part": statistics.median(bridge_cpu),
            "host_cpu_samples": host_cpu,
            "bridge_cpu_samples": bridge_cpu,
        },
    )


def paced_details(rows: Sequence[Row]) -> List[str]:
    """The detail lines of the paced and per-part rows."""
    out = []
    for r in rows:
        if r.name.startswith("paced K=") and r.extra:
            p, b = r.extra["product"], r.extra["baseline"]
            out.append(
                f"{r.name} ({r.extra['deltas_per_stream']} deltas per stream): CPU per delta bridge "
                f"{p['cpu_us_per_delta']:.0f} us / server {b['cpu_us_per_delta']:.0f}, host "
                f"{p['host_cpu_us_per_delta']:.0f} us / raw client {b['host_cpu_us_per_delta']:.0f}; "
                f"emit-to-yield p50 {p['p50_ms']:.2f} ms, p99 {p['p99_ms']:.2f} ms (raw p50 "
                f"{b['p50_ms']:.2f}, p99 {b['p99_ms']:.2f}; steady part only: p50 {p['steady_p50_ms']:.2f}, "
                f"p99 {p['steady_p99_ms']:.2f}, raw p99 {b['steady_p99_ms']:.2f}); "
                "voluntary switches per delta bridge "
                f"{p['vcsw_per_delta']:.2f} / server {b['vcsw_per_delta']:.2f}, host "
                f"{p['host_vcsw_per_delta']:.2f} / raw client {b['host_vcsw_per_delta']:.2f}")
            q = r.extra.get("normal")
            if q:
                out.append(
                    f"{r.name} with --synchronous NORMAL (same run, after FULL and the baseline): "
                    f"bridge {q['cpu_us_per_delta']:.0f} us/delta (ratio "
                    f"{b['cpu_us_per_delta'] / q['cpu_us_per_delta']:.2f}), voluntary switches "
                    f"{q['vcsw_per_delta']:.2f}, p50 {q['p50_ms']:.2f} ms, p99 {q['p99_ms']:.2f} ms")
        if r.name == "per-part" and r.extra:
            pairs = ", ".join(f"{x:.3f}" for x in r.extra["paired_ratios"])
            host, bridge = r.extra["host_cpu_us_per_part"], r.extra["bridge_cpu_us_per_part"]
            out.append(f"per-part / transport limit, run by run: {pairs}; CPU per part: host "
                       f"{host:.2f} us, bridge {bridge:.2f} us")
    return out

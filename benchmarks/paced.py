"""Issue 15's rows for the path model drivers use: one ``ctx.text`` call per delta.

- :func:`paced`: K streams (1, 10, 50) of 4-character deltas at 200 deltas/s each into one
  bridge, from K host threads; per delta: CPU of the bridge and of the host, voluntary context
  switches of each, emit-to-yield latency. Baseline in the same run: the same K streams as
  raw websockets frames (one text-delta Chunk each) from a plain server thread per
  connection, each acked by a plain websocket-client reader.
- :func:`per_part`: the same driver unpaced (one ``ctx.text`` per 1-character delta, as fast
  as it goes), parts/s and CPU per part, next to the transport limit of benchmark 1.

The driver is :mod:`benchmarks._paced_driver`; the bridge imports it from the repository root,
put on its ``PYTHONPATH`` for these rows only. CPU and switches are read by
:mod:`benchmarks._paced_sampler`, a process of its own (the host's GIL, shared by 2K threads,
held a snapshot read from here up to 1.9 s at K=50), from each process's CPU clock (ended
threads included); each window counts the deltas yielded in it by their yield stamps. The
detail line also says what each side delivered (deltas/s) and how far its sender fell behind
its pace: the raw baseline waits for each Ack before its next frame, and at K=50 on a small
machine it cannot keep the pace (its emit stamps are taken at the late send, so its latency
is that of the load it carried).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import statistics
import subprocess
import sys
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
    time_ratio,
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

SAMPLER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_paced_sampler.py")
MIN_VALID = 3
"""Windows (of :data:`SUB_WINDOWS`) whose CPU figure must be valid, or the row fails."""


def _window(a: Dict[str, Any], b: Dict[str, Any], other: int, host: int, yields: List[int],
            nominal: float) -> Dict[str, Any]:
    """The per-delta figures between two of the sampler's snapshots: deltas are those the host
    yielded between the two CPU readings (by their yield stamps, not a counter read late).
    ``valid_cpu`` is false (and the CPU figures ``None``) when the window got no delta or is
    under half its nominal length (the sampler was held up); a process's voluntary switches
    are ``None`` when one of its threads ended in the window (its switches since ``a`` are
    lost) or its thread reads took over a tenth of the window. ``invalid_because`` says why."""
    pa, pb = a["procs"][str(other)], b["procs"][str(other)]
    ha, hb = a["procs"][str(host)], b["procs"][str(host)]
    for name, x, y in (("measured", pa, pb), ("host", ha, hb)):
        if x["start"] != y["start"]:
            raise RuntimeError(f"paced: the {name} process's pid was reused or restarted within a window")
        if y["cpu"] < x["cpu"]:
            raise RuntimeError(f"paced: the {name} process's CPU clock went back ({x['cpu']} -> {y['cpu']})")
    seconds = (b["t"] - a["t"]) / 1e9
    deltas = sum(1 for y in yields if a["t"] <= y < b["t"])
    why = []
    if deltas == 0:
        why.append("no delta")
    if seconds < 0.5 * nominal:
        why.append(f"window {seconds:.3f} s of {nominal:.3f}")
    valid_cpu = not why
    n = max(deltas, 1)

    def vcsw(x: Dict[str, Any], y: Dict[str, Any], name: str) -> Any:
        # the thread reads of a snapshot smear its moment: at most a tenth of the window
        smear = max(x["t_end"] - a["t"], y["t_end"] - b["t"]) / 1e9
        lost = [t for t in x["threads"] if t not in y["threads"]]
        if lost:
            why.append(f"{len(lost)} {name} threads ended")
        elif smear > 0.1 * seconds:
            why.append(f"{name} thread reads took {smear * 1e3:.0f} ms")
        elif valid_cpu:
            return sum(v - x["threads"].get(t, 0) for t, v in y["threads"].items()) / n
        return None

    other_vcsw, host_vcsw = vcsw(pa, pb, "measured"), vcsw(ha, hb, "host")
    return {
        "deltas": deltas,
        "seconds": seconds,
        "other_cpu_us": (pb["cpu"] - pa["cpu"]) / n * 1e6 if valid_cpu else None,
        "other_cpu_ticks_us": (pb["ticks"] - pa["ticks"]) / n * 1e6 if valid_cpu else None,
        "host_cpu_us": (hb["cpu"] - ha["cpu"]) / n * 1e6 if valid_cpu else None,
        "other_vcsw": other_vcsw,
        "host_vcsw": host_vcsw,
        "valid_cpu": valid_cpu,
        "invalid_because": ", ".join(why),
    }


def _run_streams(
    k: int, duration: float, pid: int, stream: Callable[[int], List[Tuple[int, int]]]
) -> Tuple[List[Dict[str, Any]], List[float], List[float], List[float]]:
    """Run ``stream(i)`` in ``k`` threads released together; each returns its deltas' (emit,
    yield) times in CLOCK_MONOTONIC ns. While they run, the steady part (15% to 85% of
    ``duration``, the nominal length) is measured in :data:`SUB_WINDOWS` windows by
    :mod:`benchmarks._paced_sampler`, a process of its own, reading ``pid`` and this process.

    Returns:
        The per-delta figures of each window (see :func:`_window`), every latency (ms) of
        every stream, the latencies of the deltas emitted in the steady part, and each
        stream's schedule lag (ms): how much later than due, counted from its first delta,
        its last delta was emitted (the emit stamps are taken at the emit, so a sender that
        cannot keep the pace shows it here, not in its latencies).

    Raises:
        RuntimeError: fewer than :data:`MIN_VALID` windows have a valid CPU figure, or a
            process's pid was reused, or the sampler failed.
    """
    streams: List[List[Tuple[int, int]]] = []
    errors: List[BaseException] = []
    start = threading.Barrier(k + 1)

    def work(i: int) -> None:
        try:
            start.wait()
            streams.append(stream(i))
        except BaseException as exc:  # reported below
            errors.append(exc)
            start.abort()

    sampler = subprocess.Popen([sys.executable, SAMPLER, str(pid), str(os.getpid())],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert sampler.stdout is not None
        if sampler.stdout.readline() != "ready\n":  # its start-up must not eat the first window
            raise RuntimeError("paced: the sampler did not start")
        threads = [threading.Thread(target=work, args=(i,), name=f"paced-{i}") for i in range(k)]
        for t in threads:
            t.start()
        start.wait()
        t0 = time.monotonic()
        at = [t0 + duration * (0.15 + 0.70 * j / SUB_WINDOWS) for j in range(SUB_WINDOWS + 1)]
        assert sampler.stdin is not None
        sampler.stdin.write(json.dumps({"at": at}) + "\n")
        sampler.stdin.close()
        sampler.stdin = None  # communicate() below must not flush it
        for t in threads:
            t.join()
        out, _ = sampler.communicate(timeout=30)
    finally:
        if sampler.poll() is None:
            sampler.kill()
            sampler.wait()
    if errors:
        raise errors[0]
    if sampler.returncode:
        raise RuntimeError(f"paced: the sampler exited with {sampler.returncode}")
    snaps = json.loads(out)
    pairs = [p for s in streams for p in s]
    lags = [((s[-1][0] - s[0][0]) / 1e9 - (len(s) - 1) * duration / len(s)) * 1e3 for s in streams if s]
    yields = sorted(y for _, y in pairs)
    nominal = duration * 0.70 / SUB_WINDOWS
    windows = [_window(a, b, pid, os.getpid(), yields, nominal) for a, b in zip(snaps, snaps[1:])]
    valid = sum(1 for w in windows if w["valid_cpu"])
    if valid < MIN_VALID:
        raise RuntimeError(f"paced: {valid} of {len(windows)} windows valid: "
                           + "; ".join(w["invalid_because"] for w in windows))
    steady = (int(at[0] * 1e9), int(at[-1] * 1e9))
    lat = [(y - e) / 1e6 for e, y in pairs]
    in_steady = [(y - e) / 1e6 for e, y in pairs if steady[0] <= e < steady[1]]
    return windows, lat, in_steady or lat, lags


def _pairs(yields: List[int], emits: Any, what: str) -> List[Tuple[int, int]]:
    if not isinstance(emits, list) or len(emits) != len(yields):
        raise RuntimeError(f"{what}: {len(yields)} deltas but {len(emits or [])} emit times")
    return list(zip(emits, yields))


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
            pids = {s._hello.pid for s in sessions if s._hello is not None}
            if len(pids) != 1:
                raise RuntimeError(f"paced: the {k} sessions are served by bridges {sorted(pids)}, not one")
            (pid,) = pids
            # Warm the bridge's and the host's code paths once before measuring.
            sum(1 for _ in sessions[0].turn(json.dumps({"n": 50, "rate": 0})))

            def stream(i: int) -> List[Tuple[int, int]]:
                yields: List[int] = []
                emits: Any = None
                now = time.monotonic_ns
                for part in sessions[i].turn(prompt):
                    if isinstance(part, bc.TextDelta):
                        yields.append(now())
                    elif isinstance(part, bc.Data) and part.name == "emit-ns":
                        emits = part.data
                return _pairs(yields, emits, "paced product stream")

            windows, lat, steady, lags = _run_streams(k, n / rate, pid, stream)
        finally:
            for s in sessions:
                s.release()
    env.stop_bridges(ws)
    return {"windows": windows, "latencies_ms": lat, "steady_latencies_ms": steady, "schedule_lag_ms": lags}


def baseline_paced(k: int, n: int, rate: float) -> Dict[str, Any]:
    """The same ``k`` streams as raw websockets frames plus acks (see the module)."""
    spec = json.dumps({"n": n, "rate": rate, "text": "abcd"})
    ack = '{"_tag":"Ack","requestId":"2"}'
    with BaselineServer("paced") as server:
        clients = [raw_client(server.url) for _ in range(k)]
        try:

            def stream(i: int) -> List[Tuple[int, int]]:
                ws = clients[i]
                yields: List[int] = []
                now = time.monotonic_ns
                ws.send(spec)
                while True:
                    message = json.loads(ws.recv())
                    if message["_tag"] == "Exit":
                        ws.send(ack)
                        return _pairs(yields, message["emit_ns"], "paced baseline stream")
                    if len(message["values"]) != 1:
                        raise RuntimeError("paced baseline stream: a frame of more than one delta")
                    yields.append(now())
                    ws.send(ack)

            windows, lat, steady, lags = _run_streams(k, n / rate, server.pid, stream)
        finally:
            for c in clients:
                c.close()
    return {"windows": windows, "latencies_ms": lat, "steady_latencies_ms": steady, "schedule_lag_ms": lags}


def _median(windows: Sequence[Dict[str, Any]], key: str) -> float:
    """The median of ``key`` over the windows where it is valid (``nan`` if none is)."""
    values = [x[key] for x in windows if x[key] is not None]
    return float(statistics.median(values)) if values else float("nan")


def _summary(run: Dict[str, Any]) -> Dict[str, float]:
    w = [x for x in run["windows"] if x["valid_cpu"]]
    lat = run["latencies_ms"]
    return {
        "cpu_us_per_delta": _median(w, "other_cpu_us"),
        # the whole process by /proc/<pid>/stat in clock ticks over the valid windows (a check)
        "cpu_us_per_delta_proc_stat": sum(x["other_cpu_ticks_us"] * x["deltas"] for x in w)
        / max(sum(x["deltas"] for x in w), 1),
        "host_cpu_us_per_delta": _median(w, "host_cpu_us"),
        "vcsw_per_delta": _median(w, "other_vcsw"),
        "host_vcsw_per_delta": _median(w, "host_vcsw"),
        "p50_ms": percentile(lat, 50),
        "p99_ms": percentile(lat, 99),
        "steady_p50_ms": percentile(run["steady_latencies_ms"], 50),
        "steady_p99_ms": percentile(run["steady_latencies_ms"], 99),
        "deltas_measured": sum(x["deltas"] for x in w),
        "windows_valid": len(w),
        # what was delivered in the steady part, and how far the senders fell behind their pace
        "deltas_per_s": sum(x["deltas"] for x in w) / max(sum(x["seconds"] for x in w), 1e-9),
        "schedule_lag_p50_ms": percentile(run["schedule_lag_ms"], 50),
        "schedule_lag_max_ms": max(run["schedule_lag_ms"]),
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
                    [x["other_cpu_us"] for x in product["windows"] if x["valid_cpu"]])
        bf = figure(f"{k} x {n} raw websockets frames + ack at {rate:g}/s: server CPU", "us/frame",
                    [x["other_cpu_us"] for x in baseline["windows"] if x["valid_cpu"]])
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
                f"{p['host_vcsw_per_delta']:.2f} / raw client {b['host_vcsw_per_delta']:.2f}; delivered "
                f"{p['deltas_per_s']:.0f} / raw {b['deltas_per_s']:.0f} deltas/s (asked "
                f"{r.extra['streams'] * r.extra['rate_per_stream']:.0f}), schedule lag at the end p50 "
                f"{p['schedule_lag_p50_ms']:.0f} ms / raw {b['schedule_lag_p50_ms']:.0f} ms")
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

"""Benchmarks 1-7 of issue 5: the product (host client + bridge + echo driver) against the
baselines of this stack, measured in the same run.

Every benchmark takes a :class:`~benchmarks._common.BenchEnv` and
:class:`~benchmarks._common.Sizes` and returns a :class:`~benchmarks._common.Row`.
Where a measurement needs to know what the host had received when a connection dropped, it
looks at the turn's private buffers (``Turn._st``, the stream's pending values): a
benchmark of the product may look inside it; the product never depends on that.
"""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

import websocket

import bridge_client as bc
from bridge_client.client.connection import Connection
from bridge_client.client.session import Session
from bridge_client.client.turn import Turn

from ._common import (
    BenchEnv,
    Figure,
    Row,
    Sizes,
    figure,
    percentile,
    process_cpu_seconds,
    python_subprocess,
    rate_ratio,
    time_ratio,
    wait_gone,
)

__all__ = [
    "throughput",
    "replay",
    "latency",
    "cold_start",
    "resume",
    "recovery",
    "scale",
    "BATCH",
]

BATCH = 256
"""Values per Chunk of the transport baseline (the bridge's bound before issue 15's per-part
work; the bridge now sends up to ``bridge_client.bridge.turns.MAX_CHUNK_VALUES``, about 256 KiB,
when parts wait)."""


# ----------------------------------------------------------------------------- helpers


def echo_options(agent_options: Any = None, bridge_idle_timeout: float = 60.0) -> bc.BridgeOptions:
    """Options of this package's bridge with the echo driver (secret from the environment)."""
    return bc.bridge_options("echo", agent_options=agent_options, bridge_idle_timeout=bridge_idle_timeout)


def session_options(sandbox: bc.LocalSandbox, **kw: Any) -> bc.CreateSessionOptions:
    """Session options for benchmarks: generous launch and resend windows, default pings."""
    kw.setdefault("launch_timeout", 30.0)
    kw.setdefault("resend_window", 30.0)
    return bc.CreateSessionOptions(workspace=bc.Workspace(sandbox), **kw)


def warm(session: Session) -> None:
    """Connect the session (find or launch its bridge, open the session) without a turn."""
    session._connect()


class BaselineServer:
    """A baseline server process (:mod:`benchmarks._baseline_server`); a context manager."""

    def __init__(self, *args: str) -> None:
        self._proc = python_subprocess(["-m", "benchmarks._baseline_server", *args])
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line.startswith("PORT "):
            self.close()
            raise RuntimeError(f"baseline server {args} did not start: {line!r}")
        self.url = f"ws://127.0.0.1:{int(line.split()[1])}/"

    @property
    def pid(self) -> int:
        """The server process's id (for its CPU and context switches in /proc)."""
        return self._proc.pid

    def close(self) -> None:
        """Stop the server (closing its stdin), killing it if it lingers."""
        try:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            self._proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self._proc.kill()
            self._proc.wait()

    def __enter__(self) -> "BaselineServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def raw_client(url: str) -> websocket.WebSocket:
    """A plain websocket-client connection as the product opens them (UTF-8 left to the codec)."""
    return websocket.create_connection(url, timeout=30, skip_utf8_validation=True, suppress_origin=True)


def _turn_parts(session: Session, prompt: str) -> int:
    return sum(1 for _ in session.turn(prompt))


# ----------------------------------------------------------------------------- 1. throughput


TRANSPORT_WHAT = (f"websockets server -> websocket-client reader, {BATCH} parts/Chunk, JSON parsed, "
                  "Ack per Chunk")


def transport_once(url: str, parts: int) -> float:
    """Parts/s of one read from the ``chunks`` baseline server at ``url``: a plain websockets
    server sending pre-encoded Chunks of :data:`BATCH` parts to a plain websocket-client
    reader that parses the JSON and acks every Chunk (the transport limit of this stack)."""
    ws = raw_client(url)
    try:
        count = 0
        t0 = time.perf_counter()
        ws.send('{"_tag":"Request","id":"2","tag":"ReadTurn","payload":null,"headers":[]}')
        while True:
            _, data = ws.recv_data()
            message = json.loads(data)
            if message["_tag"] == "Exit":
                break
            count += len(message["values"])
            ws.send('{"_tag":"Ack","requestId":"2"}')
        elapsed = time.perf_counter() - t0
    finally:
        ws.close()
    if count != parts:
        raise RuntimeError(f"transport baseline got {count} parts, not {parts}")
    return count / elapsed


def throughput(env: BenchEnv, sizes: Sizes) -> Row:
    """1. One echo turn of ``sizes.parts`` one-character text deltas with no delay, read by a
    Session iterator: parts per second end to end, against the transport limit."""
    ws = env.workspace("throughput")
    sandbox = bc.LocalSandbox(ws)
    prompt = "y" * sizes.parts
    samples, host_cpu, bridge_cpu, limits = [], [], [], []
    # Product and baseline alternate, so that both see the same load on a shared machine.
    with bc.create_session(echo_options({"chunks": sizes.parts}), session_options(sandbox)) as session, \
            BaselineServer("chunks", str(sizes.parts), str(BATCH)) as server:
        warm(session)
        assert session._hello is not None
        pid = session._hello.pid
        for _ in range(sizes.repeats):
            b0, h0 = process_cpu_seconds(pid), time.process_time()
            t0 = time.perf_counter()
            n = _turn_parts(session, prompt)
            samples.append(n / (time.perf_counter() - t0))
            host_cpu.append((time.process_time() - h0) / n * 1e6)
            bridge_cpu.append((process_cpu_seconds(pid) - b0) / n * 1e6)
            limits.append(transport_once(server.url, sizes.parts))
    env.stop_bridges(ws)
    product = figure(f"echo turn of {sizes.parts} text deltas through Session iterator", "parts/s", samples)
    baseline = figure(TRANSPORT_WHAT, "parts/s", limits)
    ratio = rate_ratio(product, baseline)
    return Row(
        "throughput",
        product,
        baseline,
        ratio,
        "product / transport limit",
        ">= 50,000 parts/s and >= 1/4 of the transport limit",
        product.median >= 50_000 and ratio >= 0.25,
        extra={
            "paired_ratios": [a / b for a, b in zip(samples, limits)],
            # CPU time per part is steadier than wall time on a shared machine: it says which
            # process limits the rate (each has at most one core's worth of Python, the GIL).
            "host_cpu_us_per_part": statistics.median(host_cpu),
            "bridge_cpu_us_per_part": statistics.median(bridge_cpu),
        },
    )


# ----------------------------------------------------------------------------- 2. replay


def replay(env: BenchEnv, sizes: Sizes, live_throughput: Optional[Figure] = None) -> Row:
    """2. Reading a finished ``sizes.replay_parts``-part turn from offset 0 (``continue_turn``),
    against reading the same turn live (while the driver writes it), in the same session."""
    ws = env.workspace("replay")
    sandbox = bc.LocalSandbox(ws)
    n_parts = sizes.replay_parts
    prompt = "r" * n_parts
    live, replayed = [], []
    with bc.create_session(echo_options({"chunks": n_parts}), session_options(sandbox)) as session:
        warm(session)
        for _ in range(sizes.repeats):
            t0 = time.perf_counter()
            turn = session.turn(prompt)
            n = sum(1 for _ in turn)
            live.append(n / (time.perf_counter() - t0))
            state = turn.state
            t0 = time.perf_counter()
            m = sum(1 for _ in session.continue_turn(state))
            replayed.append(m / (time.perf_counter() - t0))
            if m != n:
                raise RuntimeError(f"replay read {m} parts of {n}")
    env.stop_bridges(ws)
    product = figure(f"continue_turn of a finished {n_parts}-part turn from offset 0", "parts/s", replayed)
    baseline = figure(f"the same {n_parts}-part turn read live", "parts/s", live)
    extra: Dict[str, Any] = {}
    if live_throughput is not None:
        extra["ratio_to_throughput_benchmark"] = product.median / live_throughput.median
    return Row(
        "replay",
        product,
        baseline,
        rate_ratio(product, baseline),
        "replay / live read of the same turn",
        "faster than throughput",
        product.median > (live_throughput.median if live_throughput is not None else baseline.median),
        extra=extra,
    )


# ----------------------------------------------------------------------------- 3. latency


def commit_floor_ms(folder: str, commits: int = 200) -> float:
    """Median milliseconds of one SQLite commit of a small row in WAL mode with
    ``synchronous=FULL`` in ``folder``: the storage's own cost of making one part durable
    (B03), which no bridge can go under on this file system."""
    import sqlite3

    path = os.path.join(folder, f"commit-floor-{time.monotonic_ns()}.sqlite3")
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)")
        times = []
        for _ in range(commits):
            t0 = time.perf_counter()
            conn.execute("BEGIN")
            conn.execute("INSERT INTO t (v) VALUES (?)", (b"x" * 200,))
            conn.execute("COMMIT")
            times.append((time.perf_counter() - t0) * 1000)
    finally:
        conn.close()
        for suffix in ("", "-wal", "-shm"):
            try:
                os.unlink(path + suffix)
            except FileNotFoundError:
                pass
    return statistics.median(times)


def _first_parts(sandbox: bc.LocalSandbox, options: bc.BridgeOptions, turns: int,
                 raw: Optional[websocket.WebSocket] = None) -> Tuple[List[float], List[float]]:
    """Milliseconds from ``turn()`` to the first text part of ``turns`` warm turns, and (with
    ``raw``) of a raw request/response round trip after each, so that both see the same load."""
    samples, trips = [], []
    frame = '{"_tag":"Request","id":"1","tag":"Hello","payload":null,"headers":[]}'
    with bc.create_session(options, session_options(sandbox)) as session:
        warm(session)
        for _ in range(5):
            _turn_parts(session, "a")
            if raw is not None:
                raw.send(frame)
                json.loads(raw.recv())
        for _ in range(turns):
            t0 = time.perf_counter()
            first = None
            for part in session.turn("a"):
                if first is None and isinstance(part, bc.TextDelta):
                    first = time.perf_counter() - t0
            assert first is not None
            samples.append(first * 1000)
            if raw is not None:
                t0 = time.perf_counter()
                raw.send(frame)
                json.loads(raw.recv())
                trips.append((time.perf_counter() - t0) * 1000)
    return samples, trips


def latency(env: BenchEnv, sizes: Sizes) -> Row:
    """3. ``turn()`` to the first text part with a warm bridge (echo, one part): p50 and p99,
    against a bare request/response round trip on one raw WebSocket. Also in the extras: the
    storage floor (one ``synchronous=FULL`` commit in the same folder), and with
    ``sizes.paced_normal`` the same turns on a bridge run with ``--synchronous NORMAL``."""
    ws = env.workspace("latency")
    sandbox = bc.LocalSandbox(ws)
    created: List[float] = []
    with BaselineServer("echo") as server:
        raw = raw_client(server.url)
        try:
            samples, trips = _first_parts(sandbox, echo_options(), sizes.turns, raw)
        finally:
            raw.close()
    # A new session each time on the same warm bridge: create_session, connect (Hello,
    # OpenSession), turn, first text part.
    for _ in range(max(3, sizes.turns // 10)):
        t0 = time.perf_counter()
        with bc.create_session(echo_options(), session_options(sandbox)) as fresh:
            for part in fresh.turn("a"):
                if isinstance(part, bc.TextDelta):
                    created.append((time.perf_counter() - t0) * 1000)
                    break
    floor = commit_floor_ms(ws)
    extra: Dict[str, Any] = {}
    if sizes.paced_normal:
        options = echo_options()
        normal_options = dataclasses.replace(options, args=options.args + ("--synchronous", "NORMAL"))
        normal, _ = _first_parts(sandbox, normal_options, sizes.turns)
        extra["normal_p50_ms"] = percentile(normal, 50)
        extra["normal_p99_ms"] = percentile(normal, 99)
    env.stop_bridges(ws)
    product = figure("turn() to the first text part, warm bridge (echo, 1 text part)", "ms", samples,
                     "p1-p99")
    baseline = figure("request/response round trip, one raw WebSocket", "ms", trips, "p1-p99")

    return Row(
        "latency",
        product,
        baseline,
        time_ratio(product, baseline),
        "round trip / first part (p50)",
        "p50 <= 1.0 ms (issue 15; issue 5 asked < 5 ms)",
        product.median <= 1.0,
        extra={
            "product_p99_ms": percentile(product.samples, 99),
            "baseline_p99_ms": percentile(baseline.samples, 99),
            "commit_floor_ms": floor,
            "floor_ms": baseline.median + floor,
            "new_session_first_part_ms": created,
            "new_session_first_part_p50_ms": percentile(created, 50),
            **extra,
        },
    )


# ----------------------------------------------------------------------------- 4. cold start


def interpreter_and_import(runs: int) -> List[float]:
    """Seconds to start this interpreter and import the bridge program's module."""
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import bridge_client.bridge.__main__"], check=True)
        samples.append(time.perf_counter() - t0)
    return samples


def cold_start(env: BenchEnv, sizes: Sizes) -> Row:
    """4. ``create_session`` plus the first part with no bridge running (launch included),
    against starting the interpreter and importing the bridge module."""
    samples, imports = [], []
    for i in range(sizes.cold_runs):
        imports.extend(interpreter_and_import(1))  # alternating with the cold starts
        ws = env.workspace(f"cold{i}")
        sandbox = bc.LocalSandbox(ws)
        t0 = time.perf_counter()
        session = bc.create_session(echo_options(), session_options(sandbox))
        try:
            turn = session.turn("a")
            next(turn)
            samples.append((time.perf_counter() - t0) * 1000)
            for _ in turn:
                pass
        finally:
            session.release()
            env.stop_bridges(ws)
    product = figure("create_session + first part, no bridge running", "ms", samples)
    baseline = figure("python -c 'import bridge_client.bridge.__main__'", "ms",
                      [s * 1000 for s in imports])
    return Row(
        "cold start",
        product,
        baseline,
        time_ratio(product, baseline),
        "interpreter+import / cold start",
        "< 1 s",
        product.median < 1000.0,
    )


# ----------------------------------------------------------------------------- 5. resume


def _all_yielded(turn: Turn) -> bool:
    """True when the turn holds no part received but not yet yielded (reads Turn's private
    read state: ``_yielded()`` gives the ReadState and the parts yielded of it; see
    client/read_state.py and Turn._pos)."""
    st, taken, _ = turn._yielded()
    return taken >= len(st.parts)


def _stream_pending(turn: Turn) -> Tuple[Optional[Connection], Any]:
    stream = turn._stream
    return turn._stream_conn, (stream._pending if stream is not None else None)


def _received_boundary(turn: Turn, conn: Optional[Connection], pending: Any) -> int:
    """The highest part index the host had received over ``conn`` once its reader ended."""
    if conn is not None and conn._reader is not None:
        conn._reader.join(timeout=10)
    boundary = turn._st.cursor.offset - 1
    if pending is not None:
        with pending.cond:
            values = list(pending.values)
        for value in values:
            if isinstance(value, dict) and isinstance(value.get("index"), int):
                boundary = max(boundary, value["index"])
    return boundary


def _time_to_new_part(turn: Turn, t0: float, conn: Optional[Connection], pending: Any) -> float:
    """Seconds from ``t0`` until the iterator yields a part not received before the drop."""
    boundary = _received_boundary(turn, conn, pending)
    for part in turn:
        if part.index > boundary or (isinstance(part, bc.TurnStart) and part.index == 0):
            return time.perf_counter() - t0
    raise RuntimeError("the turn ended before a new part came")


def reconnect_round_trips(count: int) -> List[float]:
    """Seconds to open a new raw WebSocket and make one round trip on it."""
    samples = []
    frame = '{"_tag":"Request","id":"1","tag":"Hello","payload":null,"headers":[]}'
    with BaselineServer("echo") as server:
        for _ in range(count):
            t0 = time.perf_counter()
            ws = raw_client(server.url)
            ws.send(frame)
            json.loads(ws.recv())
            samples.append(time.perf_counter() - t0)
            ws.close()
    return samples


def resume(env: BenchEnv, sizes: Sizes) -> Row:
    """5. From a dropped connection (the host's socket shut down under it, mid-read of a
    finished turn) to the next new part delivered; against a new raw WebSocket + round trip."""
    ws = env.workspace("resume")
    sandbox = bc.LocalSandbox(ws)
    n_parts = 20_000  # more than the host buffers ahead (4096 values), so new parts remain
    samples = []
    with bc.create_session(echo_options({"chunks": n_parts}), session_options(sandbox)) as session:
        warm(session)
        turn = session.turn("d" * n_parts)
        for _ in turn:
            pass
        state = turn.state
        for _ in range(sizes.resumes):
            turn = session.continue_turn(state)
            for part in turn:
                if part.index >= 300 and _all_yielded(turn):
                    break
            conn, pending = _stream_pending(turn)
            sock = conn._ws.sock if conn is not None else None
            assert sock is not None, "the turn reads over a connection"
            t0 = time.perf_counter()
            sock.shutdown(socket.SHUT_RDWR)  # the network drops the connection
            samples.append(_time_to_new_part(turn, t0, conn, pending) * 1000)
            turn.suspend()
    env.stop_bridges(ws)
    product = figure("connection drop -> next new part (reconnect, Hello, OpenSession, ReadTurn)", "ms",
                     samples)
    baseline = figure("new raw WebSocket + one round trip", "ms",
                      [s * 1000 for s in reconnect_round_trips(sizes.resumes)])
    return Row(
        "resume",
        product,
        baseline,
        time_ratio(product, baseline),
        "raw reconnect / resume",
        "< 100 ms",
        product.median < 100.0,
    )


# ----------------------------------------------------------------------------- 6. recovery


def recovery(env: BenchEnv, sizes: Sizes, cold: Optional[Figure] = None) -> Row:
    """6. From SIGKILL of the bridge mid-turn to the next new part delivered (relaunch, turn
    continued in the new bridge); against the cold start measured in the same run."""
    ws = env.workspace("recovery")
    sandbox = bc.LocalSandbox(ws)
    samples = []
    opts = echo_options({"steps": 10_000, "delay": 0.002})
    for _ in range(sizes.recoveries):
        with bc.create_session(opts, session_options(sandbox)) as session:
            turn = session.turn("one two three")
            for part in turn:
                if part.index >= 20 and _all_yielded(turn):
                    break
            conn, pending = _stream_pending(turn)
            assert session._hello is not None
            pid = session._hello.pid
            t0 = time.perf_counter()
            os.kill(pid, signal.SIGKILL)
            samples.append(_time_to_new_part(turn, t0, conn, pending) * 1000)
            wait_gone(pid)
            turn.suspend()
    env.stop_bridges(ws)
    product = figure("SIGKILL of the bridge mid-turn -> next new part (relaunch, continue)", "ms", samples)
    return Row(
        "recovery",
        product,
        cold,
        time_ratio(product, cold) if cold is not None else None,
        "cold start / recovery",
        "< 1.5 s",
        product.median < 1500.0,
    )


# ----------------------------------------------------------------------------- 7. scale


def scale(env: BenchEnv, sizes: Sizes, single: Optional[Figure] = None) -> Row:
    """7. ``n`` concurrent sessions (50, 100, 200) in one fresh host process on one bridge,
    each streaming an echo turn of ``sizes.scale_parts`` text deltas: total parts/s, host
    threads and host RSS per session. Baseline: one session's throughput (benchmark 1)."""
    ws = env.workspace("scale")
    results = []
    for n in sizes.sessions:
        proc = python_subprocess(["-m", "benchmarks._scale", ws, str(n), str(sizes.scale_parts)])
        out, _ = proc.communicate(timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"scale run with {n} sessions failed (exit {proc.returncode})")
        results.append(json.loads(out.strip().splitlines()[-1]))
    env.stop_bridges(ws)
    biggest = results[-1]
    product = figure(
        f"{biggest['sessions']} sessions x {sizes.scale_parts} parts, one host process, one bridge",
        "parts/s", [biggest["parts_per_s"]])
    rss_each = biggest["rss_per_session_bytes"] / 2**20
    return Row(
        "scale",
        product,
        single,
        rate_ratio(product, single) if single is not None else None,
        "total / one session's throughput",
        "200 sessions < 1 MiB host RSS each",
        (rss_each < 1.0) if biggest["sessions"] >= 200 else None,
        extra={"by_sessions": results},
    )

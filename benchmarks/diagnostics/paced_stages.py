"""``python -m benchmarks.diagnostics.paced_stages``: where a paced delta waits, step by step.
A diagnostic, not a row of ``python -m benchmarks``.

The paced row's setup (K sessions on one bridge, one host thread each, released together,
4-character deltas at 200/s per stream, one ``ctx.text`` each), with every delta stamped
(``time.monotonic_ns()``, one clock for every process of the machine) at each step:

    emit         the driver, just before ``ctx.text``
    round_start  the commit round that takes it begins (the store writer's or an inline one)
    write_end    that round's transaction is committed
    publish      its part reaches the turn's log (``Turn.publish_segment``), readers poked
    take         the stream takes it from the log to send it (after the last Chunk's Ack)
    sent         the Chunk carrying it is in the socket
    recv         the host's reader has the frame (``recv_data`` returned)
    routed       the reader has handed its values to the stream's buffer (stamped once the
                 routing returns: the turn's thread, woken inside it, may take them first)
    took         the turn's thread took it from the buffer (``Stream.take``)
    yield        the iterator yielded it (in this benchmark's loop)

The bridge's half (below) is loaded by the bridge as its driver; the host's wraps
``recv_data`` (websocket-client's and ``plain_ws``'s), ``Connection._route`` and
``Stream.take`` in this process. Printed: each step's wait (p50, p90, p99 over the
deltas of the steady part, 15% to 85% of each stream), the bridge's share (emit to sent) and
the host's (sent to yield), the commit rounds by size (their write and their
publish-and-send time), and deltas per Chunk; then where the bridge's CPU goes per delta in
the steady part: by thread (the turns' threads, websockets' readers that take the Acks, the
store's writer, the streams' own threads; from ``/proc/<pid>/task``, with voluntary
switches), the CPU of the driver's ``ctx.text`` calls, and of the commit rounds'
transactions and publish-and-send.
The stamps cost a few microseconds per delta: this is for finding where a delta waits, the
benchmark rows (``python -m benchmarks --only paced``) are the figures.

``--commit-probe`` measures instead what one lone part's commit costs the committing thread,
with the store's own code (``Store``, a turn's ``PartBuffer``, ``commit_here``) and no bridge:
CPU and voluntary switches per commit, under FULL and NORMAL, each paced (a sleep of one
interval before each part, as a paced stream commits) and back to back. On a VM the two differ
by far: a paced commit starts cold, and every I/O wait of its fsync idles the CPU.

Usage (from the repository root)::

    python -m benchmarks.diagnostics.paced_stages --streams 50 --deltas 1000 [--synchronous NORMAL]
    python -m benchmarks.diagnostics.paced_stages --commit-probe [--deltas 1000] [--rate 200]

The bridge's half: the bridge loads this module as its driver
(``--driver benchmarks.diagnostics.paced_stages:make_driver``), whose factory wraps, in the
bridge process only, the store writer's round (``StoreWriter._round`` and ``_write``),
``Turn.publish_segment``, ``Turn.take``, ``ReadStream.ack`` and each stream's sends, and notes
``time.monotonic_ns()`` at each:

- ``rounds``: one ``[start, write_end, end, items, thread]`` per commit round (``items``: what
  was queued at its start; ``end`` is after its parts were published and sent);
- ``pub``: per turn id, per part index, ``[round_start, write_end, publish]`` of its round;
- ``sent``: per turn id, per part index, ``[take, sent, inline]``: when the stream took it from
  the log, when the Chunk carrying it was in the socket, 1 when a thread other than the
  stream's own sent it;
- ``acks``: per turn id, when each Ack was handled;
- ``emit_cpu``: per turn id, the CPU nanoseconds of the driver's thread in each ``ctx.text``
  (the append, and the commit round, publish and send when that thread runs them);
- ``send_cpu``: the CPU nanoseconds of all the Chunks' sends (``Connection.send`` and
  ``try_send``: websockets' framing and the socket's send) and how many there were;
- ``threads``: every quarter second, ``[monotonic_ns, parts published so far, {tid: [name,
  CPU ns, voluntary switches]}]`` for every thread of the bridge (``/proc/self/task``).

``rounds`` also give the CPU nanoseconds of the committing thread in the transaction and in the
publish-and-send (``write_cpu``, ``publish_cpu``). Every second, when something changed, the
lot is written as JSON to ``$PACED_STAGES_OUT``. The wrappers cost a few microseconds per delta
and allocate per delta (the figures are a little higher than the benchmark's own); the tool's
own threads (the dump and the sampler) are reported apart.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import threading
import time
from collections import Counter
from typing import Any, Dict, List, Optional, Sequence, Tuple

import websocket

import bridge_client as bc
from bridge_client.bridge import read_stream, turn_log
from bridge_client.bridge.store import writer as store_writer
from bridge_client.client import connection as client_connection
from bridge_client.client import plain_ws
from bridge_client.client import stream as client_stream
from bridge_client.wire import frames

from .._common import BenchEnv, percentile
from .._paced_driver import PacedDriver
from ..paced import _run_streams, importable_benchmarks, paced_options
from ..product import session_options, warm

__all__ = ["main", "stage_table", "cpu_table", "make_driver", "OUT_ENV"]

DRIVER = "benchmarks.diagnostics.paced_stages:make_driver"
OUT_ENV = "PACED_STAGES_OUT"
STEPS = ("emit", "round_start", "write_end", "publish", "take", "sent", "recv", "routed", "took", "yield")

_now = time.monotonic_ns
_local = threading.local()
_recv: Dict[str, Dict[int, Tuple[int, int]]] = {}  # connection name -> index -> (recv, routed)
_took: Dict[str, Dict[int, int]] = {}  # connection name -> index -> took


# ---------------------------------------------------------------- the bridge's half

_INDEX = re.compile(r'"index":(\d+)')
_cpu = time.thread_time_ns
_started: List[bool] = []

rounds: List[List[Any]] = []
pub: Dict[str, Dict[int, List[int]]] = {}
sent: Dict[str, Dict[int, List[int]]] = {}
acks: Dict[str, List[int]] = {}
emit_cpu: Dict[str, List[int]] = {}
threads: List[List[Any]] = []
send_cpu = [0, 0]  # CPU ns in the connection's send and try_send, and how many calls
_published = [0]


def _wrap_writer() -> None:
    cls = store_writer.StoreWriter
    round_, write = cls._round, cls._write

    def _round(self: Any) -> bool:
        _local.round = [_now(), 0, _cpu(), 0]
        items = len(self._queue)
        ok = round_(self)
        start, write_end, cpu0, cpu1 = _local.round
        cpu2 = _cpu()
        rounds.append([start, write_end, _now(), items, threading.current_thread().name,
                       cpu1 - cpu0 if cpu1 else 0, cpu2 - cpu1 if cpu1 else 0])
        return ok

    def _write(self: Any, items: Any) -> Any:
        result = write(self, items)
        _local.round[1] = _now()
        _local.round[3] = _cpu()
        return result

    cls._round, cls._write = _round, _write  # type: ignore[method-assign]


def _wrap_turn() -> None:
    cls = turn_log.Turn
    publish, take = cls.publish_segment, cls.take

    def publish_segment(self: Any, texts: List[str], metas: Any, marks: Any) -> None:
        t = _now()
        start, write_end = getattr(_local, "round", (0, 0))[:2]
        _published[0] += len(texts)
        stamps = pub.setdefault(self.id, {})
        for text in texts:
            m = _INDEX.search(text, 0, 80)
            if m:
                stamps[int(m.group(1))] = [start, write_end, t]
        publish(self, texts, metas, marks)

    def take_(self: Any, *args: Any, **kw: Any) -> Any:
        _local.take = _now()
        return take(self, *args, **kw)

    cls.publish_segment, cls.take = publish_segment, take_  # type: ignore[method-assign]


class _Sends:
    """A stream's connection, noting when each Chunk it sends is in the socket."""

    def __init__(self, conn: Any, stream: Any) -> None:
        self._conn = conn
        self._stream = stream

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def _note(self, text: str, ok: Any, inline: int) -> None:
        if ok:
            t = _now()
            stamps = sent.setdefault(self._stream.turn.id, {})
            for m in _INDEX.finditer(text):
                stamps[int(m.group(1))] = [getattr(_local, "take", 0), t, inline]

    def try_send(self, text: str, *stream: Any) -> Any:
        c = _cpu()
        ok = self._conn.try_send(text, *stream)
        send_cpu[0] += _cpu() - c
        send_cpu[1] += 1
        self._note(text, ok, 1)
        return ok

    def send(self, text: str, *stream: Any) -> Any:
        c = _cpu()
        ok = self._conn.send(text, *stream)
        send_cpu[0] += _cpu() - c
        send_cpu[1] += 1
        self._note(text, ok, 0)
        return ok


def _wrap_stream() -> None:
    cls = read_stream.ReadStream
    init, ack = cls.__init__, cls.ack

    def __init__(self: Any, conn: Any, *args: Any, **kw: Any) -> None:
        init(self, _Sends(conn, self), *args, **kw)

    def ack_(self: Any) -> None:
        acks.setdefault(self.turn.id, []).append(_now())
        ack(self)

    cls.__init__, cls.ack = __init__, ack_  # type: ignore[method-assign]


class _TimedContext:
    """A turn's context whose ``text`` notes the CPU time of each call in ``emit_cpu``."""

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx
        self._cpu = emit_cpu.setdefault(ctx.turn_id, [])
        self._text = ctx.text

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)

    def text(self, text: str) -> int:
        c = _cpu()
        index: int = self._text(text)
        self._cpu.append(_cpu() - c)
        return index


class _StagesDriver(PacedDriver):
    def run_turn(self, ctx: Any) -> None:
        super().run_turn(_TimedContext(ctx))


def _thread_sample() -> List[Any]:
    names = {t.native_id: t.name for t in threading.enumerate()}
    per: Dict[str, List[Any]] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                cpu = int(f.read().split()[0])
            with open(f"/proc/self/task/{tid}/status") as f:
                vcsw = next(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches:"))
        except (OSError, StopIteration, ValueError):  # the thread ended meanwhile
            continue
        per[tid] = [names.get(int(tid), "?"), cpu, vcsw]
    return [_now(), _published[0], per]


def _sample_threads() -> None:
    while True:
        threads.append(_thread_sample())
        time.sleep(0.25)


def _snapshot() -> str:
    for _ in range(50):  # the dicts grow while we copy them: try again
        try:
            return json.dumps({
                "rounds": list(rounds),
                "pub": {k: dict(v) for k, v in list(pub.items())},
                "sent": {k: dict(v) for k, v in list(sent.items())},
                "acks": {k: list(v) for k, v in list(acks.items())},
                "emit_cpu": {k: list(v) for k, v in list(emit_cpu.items())},
                "threads": list(threads),
                "send_cpu": list(send_cpu),
            })
        except RuntimeError:
            continue
    return ""


def _dump(path: str) -> None:
    last = None
    while True:
        time.sleep(1.0)
        mark = (len(rounds), sum(len(v) for v in list(sent.values())))
        if mark == last:
            continue
        text = _snapshot()
        if text:
            last = mark
            with open(path + ".tmp", "w") as f:
                f.write(text)
            os.replace(path + ".tmp", path)


def make_driver(options: Any) -> PacedDriver:
    """The driver factory the bridge calls: the paced driver (see :mod:`benchmarks._paced_driver`),
    its ``ctx.text`` calls timed. The first call wraps the bridge's steps and starts writing
    the stamps to ``$PACED_STAGES_OUT``."""
    if not _started:
        _started.append(True)
        _wrap_writer()
        _wrap_turn()
        _wrap_stream()
        if os.environ.get(OUT_ENV):
            out = os.environ[OUT_ENV]
            dump = threading.Thread(target=_dump, args=(out,), name="paced-stages", daemon=True)
            dump.start()
            threading.Thread(target=_sample_threads, name="paced-stages-threads", daemon=True).start()
    return _StagesDriver()


# ------------------------------------------------------------------ the host's half


def _index(value: Any) -> Optional[int]:
    return value.get("index") if isinstance(value, dict) else getattr(value, "index", None)


def _stamp_recv(cls: Any) -> None:
    recv_data = cls.recv_data

    def recv_data_(self: Any, *args: Any, **kw: Any) -> Any:
        result = recv_data(self, *args, **kw)
        _local.recv = _now()
        return result

    cls.recv_data = recv_data_


def _wrap_host() -> None:
    route = client_connection.Connection._route
    take = client_stream.Stream.take
    # A direct ws:// connection reads with plain_ws, TLS and proxies with websocket-client.
    for cls in (websocket.WebSocket, plain_ws.PlainWebSocket):
        _stamp_recv(cls)

    def route_(self: Any, message: Any, *args: Any) -> None:
        route(self, message, *args)
        if isinstance(message, frames.Chunk):
            t = _now()
            stamps = _recv.setdefault(self.name, {})
            for v in message.values:
                i = _index(v)
                if i is not None:
                    stamps[i] = (getattr(_local, "recv", 0), t)

    def take_(self: Any, timeout: Optional[float] = None) -> Any:
        result = take(self, timeout)
        if isinstance(result, list):
            t = _now()
            stamps = _took.setdefault(self._connection.name, {})
            for v in result:
                i = _index(v)
                if i is not None:
                    stamps[i] = t
        return result

    client_connection.Connection._route = route_  # type: ignore[method-assign]
    client_stream.Stream.take = take_  # type: ignore[method-assign]


def run(k: int, n: int, rate: float, synchronous: str) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]:
    """Run ``k`` stamped paced streams of ``n`` deltas; return each stream's host stamps and
    the bridge's (see the bridge's half above)."""
    _wrap_host()
    out = os.path.join(tempfile.mkdtemp(prefix="paced-stages-"), "bridge.json")
    os.environ[OUT_ENV] = out
    streams: List[Dict[str, Any]] = []
    with BenchEnv() as env:
        sandbox = bc.LocalSandbox(env.workspace(f"stages{k}"))
        prompt = json.dumps({"n": n, "rate": rate, "text": "abcd", "stamp": True})
        with importable_benchmarks():
            options = paced_options(synchronous, driver=DRIVER)
            sessions = [bc.create_session(options, session_options(sandbox, resend_window=60.0))
                        for _ in range(k)]
            try:
                for s in sessions:
                    warm(s)
                assert sessions[0]._hello is not None
                pid = sessions[0]._hello.pid
                sum(1 for _ in sessions[0].turn(json.dumps({"n": 50, "rate": 0})))

                def stream(i: int) -> List[Tuple[int, int]]:
                    yields: Dict[int, int] = {}
                    emits: Any = None
                    turn = sessions[i].turn(prompt)
                    for part in turn:
                        if isinstance(part, bc.TextDelta):
                            yields[part.index] = _now()
                        elif isinstance(part, bc.Data) and part.name == "emit-ns":
                            emits = part.data
                    conn = sessions[i]._conn
                    streams.append({"turn": turn.id, "conn": conn.name if conn else "", "yields": yields,
                                    "emits": emits})
                    ordered = [y for _, y in sorted(yields.items())]
                    return list(zip(emits, ordered)) if isinstance(emits, list) else []

                _run_streams(k, n / rate, pid, stream)
                time.sleep(2.5)  # the bridge's stamps are written every second
            finally:
                for s in sessions:
                    s.release()
    with open(out) as f:
        bridge = json.load(f)
    return streams, bridge


def stage_rows(streams: Sequence[Dict[str, Any]], bridge: Dict[str, Any]) -> List[List[int]]:
    """One row of :data:`STEPS` stamps per delta of the steady part (15% to 85% of each
    stream) that every step saw."""
    rows = []
    for s in streams:
        pub, sent = bridge["pub"].get(s["turn"], {}), bridge["sent"].get(s["turn"], {})
        recv, took = _recv.get(s["conn"], {}), _took.get(s["conn"], {})
        yields = sorted(s["yields"].items())
        for j, (index, y) in enumerate(yields):
            if not 0.15 * len(yields) <= j <= 0.85 * len(yields):
                continue
            key = str(index)
            if key not in pub or key not in sent or index not in recv or index not in took:
                continue
            p, t, r = pub[key], sent[key], recv[index]
            rows.append([s["emits"][j], p[0], p[1], p[2], t[0], t[1], r[0], r[1], took[index], y])
    return rows


def _line(name: str, values: Sequence[float]) -> str:
    return (f"{name:28s} p50 {percentile(values, 50):8.2f}  p90 {percentile(values, 90):8.2f}  "
            f"p99 {percentile(values, 99):8.2f} ms")


def stage_table(streams: Sequence[Dict[str, Any]], bridge: Dict[str, Any]) -> List[str]:
    """The report's lines (see the module docstring)."""
    rows = stage_rows(streams, bridge)
    if not rows:
        return ["no delta was stamped at every step"]
    lines = [f"{len(rows)} deltas of the steady part, each step's wait:"]
    for a in range(1, len(STEPS)):
        waits = [(r[a] - r[a - 1]) / 1e6 for r in rows if r[a] and r[a - 1]]
        if waits:
            lines.append(_line(f"  {STEPS[a - 1]} -> {STEPS[a]}", waits))
    lines.append(_line("bridge (emit -> sent)", [(r[5] - r[0]) / 1e6 for r in rows]))
    lines.append(_line("host (sent -> yield)", [(r[9] - r[5]) / 1e6 for r in rows]))
    lines.append(_line("emit -> yield", [(r[9] - r[0]) / 1e6 for r in rows]))
    sizes: Dict[str, List[Tuple[float, float]]] = {}
    for start, write_end, end, items, *_ in bridge["rounds"]:
        if write_end:
            label = next(x for x in ("1", "2-5", "6-10", "11-25", "26+")
                         if items <= {"1": 1, "2-5": 5, "6-10": 10, "11-25": 25, "26+": 1 << 30}[x])
            sizes.setdefault(label, []).append(((write_end - start) / 1e6, (end - write_end) / 1e6))
    lines.append("commit rounds by buffers queued at their start: write, then publish and send (ms)")
    for label in ("1", "2-5", "6-10", "11-25", "26+"):
        got = sizes.get(label)
        if got:
            w, p = [x[0] for x in got], [x[1] for x in got]
            lines.append(f"  {label:>5}: {len(got):5d} rounds, write p50 {percentile(w, 50):6.2f} "
                         f"p90 {percentile(w, 90):6.2f}, publish p50 {percentile(p, 50):6.2f} "
                         f"p90 {percentile(p, 90):6.2f}")
    deltas = frames_ = inline = 0
    for stamps in bridge["sent"].values():
        deltas += len(stamps)
        frames_ += len(Counter(v[1] for v in stamps.values()))
        inline += sum(v[2] for v in stamps.values())
    lines.append(f"deltas per Chunk {deltas / max(frames_, 1):.2f}; sent by a thread other than the "
                 f"stream's own: {inline / max(deltas, 1):.0%}")
    return lines


def _thread_kind(name: str) -> str:
    for prefix, kind in (("bridge-turn-", "turn threads (driver; inline commit and send)"),
                         ("bridge-store-writer", "store writer"),
                         ("bridge-read-", "streams' own threads"),
                         ("paced-stages", "this tool's own threads"),
                         ("bridge-connection", "connection threads (frames, Acks)")):
        if name.startswith(prefix):
            return kind
    if name.endswith("(recv_events)"):  # websockets' sync server's readers, before r4-many
        return "connection threads (frames, Acks)"
    return "other"


def cpu_table(streams: Sequence[Dict[str, Any]], bridge: Dict[str, Any]) -> List[str]:
    """Where the bridge's CPU goes per delta in the steady part (see the module docstring)."""
    first = [s["emits"][0] for s in streams if s.get("emits")]
    last = [s["emits"][-1] for s in streams if s.get("emits")]
    samples = bridge.get("threads") or []
    if not first or len(samples) < 2:
        return ["no thread samples"]
    span = max(last) - min(first)
    lo, hi = min(first) + 0.15 * span, min(first) + 0.85 * span
    inside = [x for x in samples if lo <= x[0] <= hi] or samples
    a, b = inside[0], inside[-1]
    parts = max(b[1] - a[1], 1)
    kinds: Dict[str, List[float]] = {}
    for tid, (name, cpu, vcsw) in b[2].items():
        if tid in a[2]:
            k = kinds.setdefault(_thread_kind(name), [0.0, 0.0, 0])
            k[0] += (cpu - a[2][tid][1]) / parts / 1e3
            k[1] += (vcsw - a[2][tid][2]) / parts
            k[2] += 1
    total = sum(v[0] for k, v in kinds.items() if not k.startswith("this tool"))
    lines = [f"bridge CPU per part published in the steady part ({parts} parts): {total:.1f} us, by thread "
             "(CPU us, voluntary switches per part, threads):"]
    for kind, (cpu, vcsw, n) in sorted(kinds.items(), key=lambda kv: -kv[1][0]):
        lines.append(f"  {kind:46s} {cpu:7.1f} us  {vcsw:5.2f}  {n}")
    emits = [c / 1e3 for s in streams for c in bridge.get("emit_cpu", {}).get(s["turn"], [])[
        int(0.15 * len(s["emits"] or [])):int(0.85 * len(s["emits"] or []))]]
    if emits:
        lines.append(f"  in the turns' threads, each ctx.text: CPU p50 {percentile(emits, 50):.1f} us, "
                     f"mean {sum(emits) / len(emits):.1f} us")
    steady = [r for r in bridge["rounds"] if lo <= r[0] <= hi and len(r) > 6 and r[1]]
    if steady:
        write = sum(r[5] for r in steady) / len(steady) / 1e3
        publish = sum(r[6] for r in steady) / len(steady) / 1e3
        lines.append(f"  commit rounds: {len(steady) / parts:.2f} per part; CPU per round: the "
                     f"transaction {write:.1f} us, publish and send {publish:.1f} us")
    total_ns, sends = bridge.get("send_cpu") or (0, 0)
    if sends:
        lines.append(f"  each Chunk's send (websockets' framing and the socket's send), whole run: CPU "
                     f"{total_ns / sends / 1e3:.1f} us ({sends} sends)")
    return lines


class _NoSink:
    def publish_segment(self, texts: List[str], metas: Any, marks: Any) -> None:
        pass


def commit_probe(synchronous: str, n: int, pause: float) -> Tuple[float, float]:
    """Commit ``n`` lone parts of a turn with the store's own code, sleeping ``pause`` seconds
    before each; return the committing thread's CPU (us) and voluntary switches per commit."""
    import resource

    from bridge_client.bridge.store import Store

    folder = tempfile.mkdtemp(prefix="commit-probe-")
    store = Store(os.path.join(folder, "bridge.sqlite3"), synchronous=synchronous)
    lock = threading.Lock()
    buffer = store.buffer("t" * 32, _NoSink(), lock)
    cpu = switches = 0
    try:
        for i in range(n):
            if pause:
                time.sleep(pause)
            with lock:
                buffer.add(i, '{"type":"text-delta","index":%d,"step":0,"attempt":1,"text":"abcd"}' % i,
                           (0, 1, "text-delta"), (), False)
            r0, c0 = resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw, time.thread_time_ns()
            if not store.commit_here():
                store.wait(buffer.ticket(i))
            cpu += time.thread_time_ns() - c0
            switches += resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw - r0
    finally:
        store.close()
    return cpu / n / 1e3, switches / n


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.diagnostics.paced_stages",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", type=int, default=50, help="paced streams into one bridge (default 50)")
    p.add_argument("--deltas", type=int, default=1000, help="deltas per stream (default 1000)")
    p.add_argument("--rate", type=float, default=200.0, help="deltas per second per stream (default 200)")
    p.add_argument("--synchronous", default="", help="the bridge's --synchronous (default: its own, FULL)")
    p.add_argument("--commit-probe", action="store_true",
                   help="a lone part's commit alone (no bridge), FULL and NORMAL, paced and back to back")
    args = p.parse_args(argv)
    load = os.getloadavg()[0]
    if args.commit_probe:
        print(f"one lone part per commit, {args.deltas} commits each, load average {load:.2f} at the start")
        for sync in ("FULL", "NORMAL"):
            for pause, how in ((1.0 / args.rate, f"paced ({args.rate:g}/s)"), (0.0, "back to back")):
                cpu, switches = commit_probe(sync, args.deltas, pause)
                print(f"  {sync:6s} {how:16s} CPU {cpu:6.1f} us, voluntary switches {switches:.2f} "
                      "per commit")
        return 0
    streams, bridge = run(args.streams, args.deltas, args.rate, args.synchronous)
    print(f"K={args.streams}, {args.deltas} deltas per stream at {args.rate:g}/s, synchronous "
          f"{args.synchronous or 'FULL'}, load average {load:.2f} at the start")
    for line in stage_table(streams, bridge) + cpu_table(streams, bridge):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

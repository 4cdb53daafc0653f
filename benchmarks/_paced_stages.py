"""The bridge's half of ``python -m benchmarks.paced_stages``: the paced driver, plus time
stamps of every delta at each step the bridge takes it through. A diagnostic, not a row.

Loaded by the bridge as ``--driver benchmarks._paced_stages:make_driver``. Importing it wraps,
in the bridge process only, the store writer's round (``StoreWriter._round`` and ``_write``),
``Turn.publish_segment``, ``Turn.take``, ``ReadStream.ack`` and each stream's sends, and notes
``time.monotonic_ns()`` (one clock for every process of the machine) at each:

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

import json
import os
import re
import threading
import time
from typing import Any, Dict, List

from bridge_client.bridge import read_stream, turn_log
from bridge_client.bridge.store import writer as store_writer

from ._paced_driver import PacedDriver

__all__ = ["make_driver", "OUT_ENV"]

OUT_ENV = "PACED_STAGES_OUT"
_now = time.monotonic_ns
_INDEX = re.compile(r'"index":(\d+)')
_local = threading.local()

_cpu = time.thread_time_ns

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


_wrap_writer()
_wrap_turn()
_wrap_stream()
if os.environ.get(OUT_ENV):
    threading.Thread(target=_dump, args=(os.environ[OUT_ENV],), name="paced-stages", daemon=True).start()
    threading.Thread(target=_sample_threads, name="paced-stages-threads", daemon=True).start()


def make_driver(options: Any) -> PacedDriver:
    """The driver factory the bridge calls: the paced driver (see :mod:`._paced_driver`), its
    ``ctx.text`` calls timed."""
    return _StagesDriver()

"""``python -m benchmarks.diagnostics.first_stages``: where a warm turn's first text part
waits, step by step. A diagnostic, not a row of ``python -m benchmarks``.

The latency row's path (``turn()`` on an open session of a warm echo bridge, to the first
``TextDelta``), with ``time.monotonic_ns()`` stamps (one clock for every process of the
machine) in the host (``turn``: the call; ``tx0``/``tx1``: the send of StartTurn and ReadTurn;
``recv``: the reader has the answer's frame; ``answer``: the caller has StartTurn's answer;
``first``: the first text part yielded) and in the bridge (below).
Printed: for each step, the wait since the step before it (p50, p90 over the turns), the steps
ordered by their median time since the call. A step that lands after the first part in some
turns (the bridge's ``send1`` when the host is quicker than the bridge's send returns) is still
listed. The stamps cost a few microseconds each.

The bridge's half: the bridge loads this module as its driver
(``--driver benchmarks.diagnostics.first_stages:make_driver``), whose factory wraps, in the
bridge process only: the connection thread's reading of a request frame (``sock``), its taking
it (``frame``), ``StartTurn``'s handler (``start``; ``created`` once the turn is made and its
thread let go), the driver's ``run_turn`` (``run``, ``ran``), the commit's transaction
(``commit0``, ``commit1``), StartTurn seeing it committed (``waited``), and the send of the
answer's frame (``send0``, ``send1``). Every half second, when something changed, the
``[name, ns]`` list is written as JSON to ``$FIRST_STAGES_OUT``.

Usage (from the repository root)::

    python -m benchmarks.diagnostics.first_stages [--turns 300] [--synchronous NORMAL]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional, Sequence

import websocket

import bridge_client as bc
from bridge_client.client import connection as client_connection
from bridge_client.bridge import connection, turn_runner, turns, ws_connection
from bridge_client.bridge.store import writer as store_writer
from bridge_client.client import plain_ws
from bridge_client.drivers import echo

from .._common import BenchEnv, percentile
from ..paced import importable_benchmarks
from ..product import session_options, warm

__all__ = ["main", "make_driver", "OUT_ENV"]

DRIVER = "benchmarks.diagnostics.first_stages:make_driver"
OUT_ENV = "FIRST_STAGES_OUT"
_now = time.monotonic_ns
_host: List[List[Any]] = []
stamps: List[List[Any]] = []  # the bridge's


# ---------------------------------------------------------------- the bridge's half

_started: List[bool] = []


def _wrap() -> None:
    ws = ws_connection.WsConnection
    read_frame = ws._frame

    def read_frame_(self: Any, event: Any) -> None:
        data = getattr(event, "data", b"")
        if data[:1] == b"[" or bytes(data[:17]) == b'{"_tag":"Request"':
            stamps.append(["sock", _now()])
        read_frame(self, event)

    ws._frame = read_frame_  # type: ignore[method-assign]

    conn = connection.Connection
    frame, send_locked = conn._frame, conn._send_locked

    def frame_(self: Any, data: Any) -> None:
        stamps.append(["frame", _now()])
        frame(self, data)

    def send_locked_(self: Any, text: str, *args: Any, **kwargs: Any) -> Any:
        mark = '"StartTurn"' in text or text[:1] == "["
        if mark:
            stamps.append(["send0", _now()])
        ok = send_locked(self, text, *args, **kwargs)
        if mark:
            stamps.append(["send1", _now()])
        return ok

    read_turn, answer_start = conn._read_turn, conn._answer_start

    def read_turn_(self: Any, *args: Any, **kw: Any) -> None:
        stamps.append(["read", _now()])
        read_turn(self, *args, **kw)
        stamps.append(["served", _now()])

    def answer_start_(self: Any, *args: Any, **kw: Any) -> None:
        stamps.append(["answer0", _now()])
        answer_start(self, *args, **kw)

    conn._frame, conn._send_locked = frame_, send_locked_  # type: ignore[method-assign]
    conn._read_turn, conn._answer_start = read_turn_, answer_start_  # type: ignore[method-assign]

    manager = turns.TurnManager
    start_turn = manager.start_turn

    def start_turn_(self: Any, *args: Any, **kw: Any) -> Any:
        stamps.append(["start", _now()])
        return start_turn(self, *args, **kw)

    manager.start_turn = start_turn_  # type: ignore[method-assign]
    runner = turn_runner.TurnRunner
    create = runner._create

    def create_(self: Any, *args: Any, **kw: Any) -> Any:
        result = create(self, *args, **kw)
        stamps.append(["created", _now()])
        return result

    runner._create = create_  # type: ignore[method-assign]
    writer = store_writer.StoreWriter
    write = writer._write

    def write_(self: Any, *args: Any, **kw: Any) -> Any:
        stamps.append(["commit0", _now(), threading.current_thread().name])
        result = write(self, *args, **kw)
        stamps.append(["commit1", _now()])
        return result

    wait = writer.wait

    def wait_(self: Any, *args: Any, **kw: Any) -> Any:
        result = wait(self, *args, **kw)
        stamps.append(["waited", _now()])
        return result

    writer._write, writer.wait = write_, wait_  # type: ignore[method-assign]


def _dump(path: str) -> None:
    last = -1
    while True:
        time.sleep(0.5)
        if len(stamps) == last:
            continue
        last = len(stamps)
        with open(path + ".tmp", "w") as f:
            json.dump(list(stamps), f)
        os.replace(path + ".tmp", path)


class _Stamped(echo.EchoDriver):
    def run_turn(self, ctx: Any) -> None:
        stamps.append(["run", _now()])
        super().run_turn(ctx)
        stamps.append(["ran", _now()])


def make_driver(options: Any) -> echo.EchoDriver:
    """The driver factory the bridge calls: the echo driver, its ``run_turn`` stamped. The
    first call wraps the bridge's steps and starts writing the stamps to ``$FIRST_STAGES_OUT``."""
    if not _started:
        _started.append(True)
        _wrap()
        if os.environ.get(OUT_ENV):
            out = os.environ[OUT_ENV]
            dump = threading.Thread(target=_dump, args=(out,), name="first-stages", daemon=True)
            dump.start()
    return _Stamped()


# ------------------------------------------------------------------ the host's half


def _wrap_host() -> None:
    conn = client_connection.Connection
    transmit, answer = conn._transmit, conn.answer

    def transmit_(self: Any, data: bytes) -> None:
        _host.append(["tx0", _now()])
        transmit(self, data)
        _host.append(["tx1", _now()])

    def answer_(self: Any, *args: Any, **kw: Any) -> Any:
        value = answer(self, *args, **kw)
        _host.append(["answer", _now()])
        return value

    conn._transmit, conn.answer = transmit_, answer_  # type: ignore[method-assign]
    # A direct ws:// connection reads with plain_ws, TLS and proxies with websocket-client.
    for cls in (websocket.WebSocket, plain_ws.PlainWebSocket):
        _stamp_recv(cls)


def _stamp_recv(cls: Any) -> None:
    recv_data = cls.recv_data

    def recv_data_(self: Any, *args: Any, **kw: Any) -> Any:
        result = recv_data(self, *args, **kw)
        _host.append(["recv", _now()])
        return result

    cls.recv_data = recv_data_


def run(turns: int, synchronous: str) -> List[Dict[str, int]]:
    """``turns`` stamped turns; returns, per turn, each step's first stamp in that turn (up to
    the next turn's call)."""
    _wrap_host()
    out = os.path.join(tempfile.mkdtemp(prefix="first-stages-"), "bridge.json")
    os.environ[OUT_ENV] = out
    with BenchEnv() as env:
        sandbox = bc.LocalSandbox(env.workspace("first-stages"))
        with importable_benchmarks():
            options = bc.bridge_options(DRIVER, agent_id="echo", bridge_idle_timeout=60.0)
            if synchronous:
                options = dataclasses.replace(options, args=options.args + ("--synchronous", synchronous))
            with bc.create_session(options, session_options(sandbox)) as session:
                warm(session)
                for _ in range(20):
                    sum(1 for _ in session.turn("a"))
                del _host[:]
                for _ in range(turns):
                    _host.append(["turn", _now()])
                    first = False
                    for part in session.turn("a"):
                        if not first and isinstance(part, bc.TextDelta):
                            _host.append(["first", _now()])
                            first = True
                time.sleep(1.2)  # the bridge's stamps are written every half second
        with open(out) as f:
            bridge = json.load(f)
    events = sorted(_host + bridge, key=lambda e: e[1])
    rows: List[Dict[str, int]] = []
    for name, t, *_ in events:
        if name == "turn":
            rows.append({"turn": t})
        elif rows and name not in rows[-1]:
            rows[-1][name] = t
    return rows


def _median_order(rows: List[Dict[str, int]]) -> List[str]:
    """Every step seen in any turn, ordered by its median time since that turn's call.

    Not the most common order of whole turns: with few turns each order may be seen once, and
    the one picked could lack a step that other turns have."""
    since: Dict[str, List[int]] = {}
    for r in rows:
        for step, t in r.items():
            since.setdefault(step, []).append(t - r["turn"])
    return sorted(since, key=lambda step: (percentile(since[step], 50), step))


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.diagnostics.first_stages",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--turns", type=int, default=300)
    p.add_argument("--synchronous", default="", help="the bridge's --synchronous (default: FULL)")
    args = p.parse_args(argv)
    rows = [r for r in run(args.turns, args.synchronous) if "first" in r]
    order = _median_order(rows)
    print(f"{len(rows)} turns; steps by their median time since the call: {' '.join(order)}")
    print(f"{'step':10s} {'p50 us':>8s} {'p90 us':>8s}   (wait since the step before, in that order)")
    for before, step in zip(order, order[1:]):
        waits = [(r[step] - r[before]) / 1000 for r in rows if step in r and before in r]
        print(f"{step:10s} {percentile(waits, 50):8.0f} {percentile(waits, 90):8.0f}")
    total = [(r["first"] - r["turn"]) / 1000 for r in rows]
    print(f"{'total':10s} {percentile(total, 50):8.0f} {percentile(total, 90):8.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``python -m benchmarks.first_stages``: where a warm turn's first text part waits, step by step.

The latency row's path (``turn()`` on an open session of a warm echo bridge, to the first
``TextDelta``), with ``time.monotonic_ns()`` stamps (one clock for every process of the
machine) in the host (``turn``: the call; ``tx0``/``tx1``: the send of StartTurn and ReadTurn;
``recv``: the reader has the answer's frame; ``answer``: the caller has StartTurn's answer;
``first``: the first text part yielded) and in the bridge (:mod:`benchmarks._first_stages`).
Printed: for each step, the wait since the step before it (p50, p90 over the turns), the steps
ordered by their median time since the call. A step that lands after the first part in some
turns (the bridge's ``send1`` when the host is quicker than the bridge's send returns) is still
listed. The stamps cost a few microseconds each.

Usage (from the repository root)::

    python -m benchmarks.first_stages [--turns 300] [--synchronous NORMAL]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence

import websocket

import bridge_client as bc
from bridge_client.client import connection as client_connection
from bridge_client.client import plain_ws

from ._common import BenchEnv, percentile
from ._first_stages import OUT_ENV
from .paced import importable_benchmarks
from .product import session_options, warm

__all__ = ["main"]

DRIVER = "benchmarks._first_stages:make_driver"
_now = time.monotonic_ns
_host: List[List[Any]] = []


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
    p = argparse.ArgumentParser(prog="python -m benchmarks.first_stages", description=__doc__.split("\n")[0])
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

"""The bridge's half of ``python -m benchmarks.first_stages``: the echo driver, plus time
stamps (``time.monotonic_ns()``, one clock for every process of the machine) at each step a
warm turn's start takes through the bridge. A diagnostic, not a row.

Loaded by the bridge as ``--driver benchmarks._first_stages:make_driver``. Importing it wraps,
in the bridge process only: the connection thread's reading of a request frame (``sock``),
its taking it (``frame``), ``StartTurn``'s handler (``start``; ``created`` once the turn
is made and its thread let go), the driver's ``run_turn`` (``run``, ``ran``), the commit's
transaction (``commit0``, ``commit1``), StartTurn seeing it committed (``waited``), and the
send of the answer's frame (``send0``, ``send1``). Every half second, when something changed,
the ``[name, ns]`` list is written as JSON to ``$FIRST_STAGES_OUT``.
"""
from __future__ import annotations

import json
import os
import threading
import time
from typing import Any, List

from bridge_client.bridge import connection, turn_runner, turns, ws_connection
from bridge_client.bridge.store import writer as store_writer
from bridge_client.drivers import echo

__all__ = ["make_driver", "OUT_ENV"]

OUT_ENV = "FIRST_STAGES_OUT"
_now = time.monotonic_ns
stamps: List[List[Any]] = []


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


_wrap()
if os.environ.get(OUT_ENV):
    threading.Thread(target=_dump, args=(os.environ[OUT_ENV],), name="first-stages", daemon=True).start()


class _Stamped(echo.EchoDriver):
    def run_turn(self, ctx: Any) -> None:
        stamps.append(["run", _now()])
        super().run_turn(ctx)
        stamps.append(["ran", _now()])


def make_driver(options: Any) -> echo.EchoDriver:
    """The driver factory the bridge calls: the echo driver, its ``run_turn`` stamped."""
    return _Stamped()

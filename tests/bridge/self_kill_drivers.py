"""Drivers for tests/bridge/test_start_turn_batch_kills.py (``self_kill_drivers:make_kill``; the
harness puts this folder on PYTHONPATH).

``make_kill``: on its first run (no file ``options["marker"]`` yet) it makes the file and
SIGKILLs its own bridge after ``options["delay"]`` seconds from a thread of its own, while it
emits (so the kill falls around StartTurn's commit and its batch answer); every run emits two
steps of ``options["deltas"]`` text deltas, 1 ms apart."""
from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

from bridge_client.bridge.driver import TurnContext


class KillDriver:
    agent_id = "kill"

    def __init__(self, options: Any) -> None:
        self.marker = options["marker"]
        self.delay = float(options["delay"])
        self.deltas = int(options.get("deltas", 5))

    def initial_state(self) -> Any:
        return None

    def run_turn(self, ctx: TurnContext) -> None:
        if not os.path.exists(self.marker):
            open(self.marker, "w").close()
            if self.delay <= 0:
                os.kill(os.getpid(), signal.SIGKILL)
            timer = threading.Timer(self.delay, os.kill, (os.getpid(), signal.SIGKILL))
            timer.daemon = True
            timer.start()
        for step in range(ctx.completed_steps, 2):
            ctx.start_step()
            for i in range(self.deltas):
                ctx.text(f"{step}.{i} ")
                time.sleep(0.001)
            ctx.finish_step()


def make_kill(options: Any) -> KillDriver:
    return KillDriver(options)

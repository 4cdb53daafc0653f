"""A client written with Effect RPC itself (effect 4.1 RpcClient, src/client.ts) drives a bridge
of this package: Hello, OpenSession, StartTurn, ReadTurn (the Effect client acks every Chunk),
an interrupted read, CancelTurn, CloseSession, typed failures decoded into the group's error
classes, pings, and 401 for a wrong token (C17). Request ids as Effect sends them (numbers)
and as strings."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from bridge_harness import TOKEN
from interop_support import ts_command

pytestmark = pytest.mark.timeout(90)

CHECKS = {
    "Hello",
    "OpenSession",
    "OpenSession keeps the higher revision",
    "StartTurn and ReadTurn together",
    "OpenSession with env",
    "StartTurn",
    "StartTurn again is harmless",
    "ReadTurn with acks",
    "ReadTurn from an offset",
    "ReadTurn afterStep",
    "Interrupt of a read",
    "CancelTurn",
    "cancelled turn ends with turn-finish",
    "typed failure SessionNotFound",
    "typed failure TurnConflict",
    "typed failure TurnNotFound (stream)",
    "typed failure TurnNotFound",
    "Ping/Pong keeps the connection",
    "CloseSession",
    "typed failure SessionNotFound (CloseSession)",
    "401 with a wrong token",
}


@pytest.mark.parametrize("ids", ["number", "string"])
def test_b07_b08_c17_effect_client_drives_our_bridge(py_bridge, ids):
    argv = ts_command("client.ts")
    env = dict(
        os.environ, BRIDGE_INTEROP_URL=py_bridge.url, BRIDGE_INTEROP_TOKEN=TOKEN, BRIDGE_INTEROP_IDS=ids
    )
    done = subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=60, cwd=os.path.dirname(argv[-1])
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    checks = {line["check"]: line for line in lines if "check" in line}
    failed = [c for c in checks.values() if not c["ok"]]
    assert not failed, (
        f"Effect client checks failed: {failed}\nstderr: {done.stderr[-2000:]}"
        f"\nbridge log:\n{py_bridge.log()[-2000:]}"
    )
    assert set(checks) == CHECKS, f"missing checks: {CHECKS - set(checks)}; stderr: {done.stderr[-2000:]}"
    assert done.returncode == 0
    assert lines[-1] == {"summary": {"passed": len(CHECKS), "failed": 0}}
    assert py_bridge.proc.poll() is None, "the bridge is still up"

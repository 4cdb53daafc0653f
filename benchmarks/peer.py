"""Benchmark 8 of issue 5: a peer doing the same job, SWE-ReX.

SWE-ReX's ``swerex-remote`` server (FastAPI on uvicorn) runs on loopback with an auth token;
its ``RemoteRuntime`` client (aiohttp, one HTTP request per call) runs the command with
``execute(Command(command=..., shell=True, cwd=folder))``. Our side: a ``shell`` turn with the
same command through our bridge in a LocalSandbox of the same kind of folder, read to
``turn-finish``. Both sides are warm (server up, one command run first).

Install the peer with the ``benchmarks`` extra (``pip install -e '.[benchmarks]'``); without
it the row says ``skipped: ...``.
"""
from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from typing import List, Optional

import bridge_client as bc

from ._common import BenchEnv, Row, Sizes, figure, kill_pids_under, time_ratio
from .product import session_options

__all__ = ["swe_rex", "COMMAND"]

COMMAND = "echo hello"
"""The short command both sides run."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server_command() -> Optional[List[str]]:
    exe = shutil.which(
        "swerex-remote", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    )
    return [exe] if exe else None


def _peer_missing() -> Optional[str]:
    """Why the peer cannot run here, or ``None`` when it can."""
    try:
        import aiohttp  # noqa: F401  (RemoteRuntime needs it; swe-rex 1.4 does not declare it)
        import swerex  # noqa: F401
        from swerex.runtime.remote import RemoteRuntime  # noqa: F401
    except ImportError as exc:
        return f"skipped: swe-rex is not installed here ({exc}); pip install -e '.[benchmarks]'"
    if _server_command() is None:
        return "skipped: the swerex-remote program is not on PATH"
    return None


async def _swe_rex_times(port: int, token: str, folder: str, count: int) -> List[float]:
    from swerex.runtime.abstract import Command
    from swerex.runtime.remote import RemoteRuntime

    runtime = RemoteRuntime(host="http://127.0.0.1", port=port, auth_token=token, timeout=30.0)
    await runtime.wait_until_alive(timeout=60.0)
    command = Command(command=COMMAND, shell=True, cwd=folder, timeout=30)
    first = await runtime.execute(command)
    if first.exit_code != 0 or first.stdout.strip() != "hello":
        raise RuntimeError(f"swe-rex ran the command badly: {first!r}")
    samples = []
    for _ in range(count):
        t0 = time.perf_counter()
        await runtime.execute(command)
        samples.append(time.perf_counter() - t0)
    return samples


def swe_rex_times(folder: str, count: int) -> List[float]:
    """Seconds per ``execute`` of :data:`COMMAND` by SWE-ReX's RemoteRuntime against its
    ``swerex-remote`` server (started here on loopback, with a token; stopped after)."""
    cmd = _server_command()
    assert cmd is not None
    port, token = _free_port(), secrets.token_hex(16)
    server = subprocess.Popen(
        cmd + ["--host", "127.0.0.1", "--port", str(port), "--auth-token", token],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=folder,
    )
    try:
        return asyncio.run(_swe_rex_times(port, token, folder, count))
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def ours_times(env: BenchEnv, count: int) -> List[float]:
    """Seconds per ``shell`` turn running :data:`COMMAND` through our bridge, read to the end."""
    folder = env.workspace("peer-ours")
    sandbox = bc.LocalSandbox(folder)
    samples = []
    options = bc.bridge_options("shell", bridge_idle_timeout=60.0)
    with bc.create_session(options, session_options(sandbox)) as session:
        turn = session.turn(COMMAND)
        parts = list(turn)
        if turn.text() != "hello\n" or parts[-1].finish_reason != "stop":  # type: ignore[attr-defined]
            raise RuntimeError(f"the shell turn went wrong: {turn.text()!r}")
        for _ in range(count):
            t0 = time.perf_counter()
            for _ in session.turn(COMMAND):
                pass
            samples.append(time.perf_counter() - t0)
    kill_pids_under(folder)
    return samples


def swe_rex(env: BenchEnv, sizes: Sizes) -> Row:
    """8. Median time per command: a ``shell`` turn through our bridge against SWE-ReX's
    RemoteRuntime ``execute`` on its ``swerex-remote`` server, same command, same run."""
    ours = figure(
        f"shell turn '{COMMAND}' through the bridge, read to turn-finish",
        "ms",
        [s * 1000 for s in ours_times(env, sizes.commands)],
    )
    target = "(none; ratio > 1: ours is faster)"
    missing = _peer_missing()
    if missing is not None:
        return Row("peer: SWE-ReX", ours, None, None, "", target, None, skipped=missing)
    folder = env.workspace("peer-swerex")
    try:
        peer = figure(
            f"SWE-ReX RemoteRuntime.execute('{COMMAND}', shell=True) via swerex-remote",
            "ms",
            [s * 1000 for s in swe_rex_times(folder, sizes.commands)],
        )
    except Exception as exc:
        return Row(
            "peer: SWE-ReX",
            ours,
            None,
            None,
            "",
            target,
            None,
            skipped=f"skipped: SWE-ReX did not run here: {type(exc).__name__}: {exc}"[:300],
        )
    return Row("peer: SWE-ReX", ours, peer, time_ratio(ours, peer), "SWE-ReX time / ours", target, None)

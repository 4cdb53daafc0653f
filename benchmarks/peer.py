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
from typing import Any, List, Optional

import bridge_client as bc
from bridge_client.client.session import Session

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


class SweRex:
    """SWE-ReX's ``swerex-remote`` server (started on loopback with a token, in ``folder``) and
    its ``RemoteRuntime`` client on a private event loop; a context manager.

    Raises:
        RuntimeError: the server did not come up, or ran the command wrongly.
    """

    def __init__(self, folder: str) -> None:
        from swerex.runtime.abstract import Command
        from swerex.runtime.remote import RemoteRuntime

        cmd = _server_command()
        assert cmd is not None
        port, token = _free_port(), secrets.token_hex(16)
        self._server = subprocess.Popen(
            cmd + ["--host", "127.0.0.1", "--port", str(port), "--auth-token", token],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=folder,
        )
        self._loop = asyncio.new_event_loop()
        try:
            self._runtime = RemoteRuntime(host="http://127.0.0.1", port=port, auth_token=token, timeout=30.0)
            self._loop.run_until_complete(self._runtime.wait_until_alive(timeout=60.0))
            self._command = Command(command=COMMAND, shell=True, cwd=folder, timeout=30)
            first = self._loop.run_until_complete(self._runtime.execute(self._command))
            if first.exit_code != 0 or first.stdout.strip() != "hello":
                raise RuntimeError(f"swe-rex ran the command badly: {first!r}")
        except BaseException:
            self.close()
            raise

    def once(self) -> float:
        """Seconds for one ``execute`` of :data:`COMMAND`."""
        t0 = time.perf_counter()
        self._loop.run_until_complete(self._runtime.execute(self._command))
        return time.perf_counter() - t0

    def close(self) -> None:
        """Stop the server and close the loop."""
        self._loop.close()
        self._server.terminate()
        try:
            self._server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._server.kill()
            self._server.wait()

    def __enter__(self) -> "SweRex":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _ours_once(session: Session) -> float:
    """Seconds for one ``shell`` turn running :data:`COMMAND`, read to ``turn-finish``."""
    t0 = time.perf_counter()
    for _ in session.turn(COMMAND):
        pass
    return time.perf_counter() - t0


def swe_rex(env: BenchEnv, sizes: Sizes) -> Row:
    """8. Median time per command: a ``shell`` turn through our bridge against SWE-ReX's
    RemoteRuntime ``execute`` on its ``swerex-remote`` server, same command, alternating."""
    target = "(none; ratio > 1: ours is faster)"
    folder = env.workspace("peer-ours")
    options = bc.bridge_options("shell", bridge_idle_timeout=60.0)
    ours: List[float] = []
    theirs: List[float] = []
    skipped = _peer_missing()
    with bc.create_session(options, session_options(bc.LocalSandbox(folder))) as session:
        turn = session.turn(COMMAND)
        parts = list(turn)
        if turn.text() != "hello\n" or parts[-1].finish_reason != "stop":  # type: ignore[attr-defined]
            raise RuntimeError(f"the shell turn went wrong: {turn.text()!r}")
        peer: Optional[SweRex] = None
        if skipped is None:
            try:
                peer = SweRex(env.workspace("peer-swerex"))
            except Exception as exc:
                skipped = f"skipped: SWE-ReX did not run here: {type(exc).__name__}: {exc}"[:300]
        try:
            for _ in range(sizes.commands):  # the two sides alternate: both see the same load
                ours.append(_ours_once(session) * 1000)
                if peer is not None:
                    theirs.append(peer.once() * 1000)
        finally:
            if peer is not None:
                peer.close()
    kill_pids_under(folder)
    mine = figure(f"shell turn '{COMMAND}' through the bridge, read to turn-finish", "ms", ours)
    if skipped is not None:
        return Row("peer: SWE-ReX", mine, None, None, "", target, None, skipped=skipped)
    other = figure(f"SWE-ReX RemoteRuntime.execute('{COMMAND}', shell=True) via swerex-remote", "ms", theirs)
    return Row("peer: SWE-ReX", mine, other, time_ratio(mine, other), "SWE-ReX time / ours", target, None)

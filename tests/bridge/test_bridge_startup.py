"""What the bridge program does before it serves: what it imports, the notice it gives its
launcher, and a loser of the lock race that waits for the winner (B01, B02, C05).

Run with ``-X importtime``: the interpreter names every module it imports on stderr, so
the lists below are the bridge's real start-up imports, up to the moment it says it listens.
"""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from typing import List, Set, Tuple

import pytest

import bridge_client
from bridge_client.state_dir import identity
from bridge_harness import HERE, REPO, prepare_state

pytestmark = pytest.mark.timeout(60)

NOTICE_ENV = "BRIDGE_CLIENT_NOTICE_FD"

# Never needed to serve: the host side, the sandbox adapters, the template, the host's
# WebSocket client and HTTP stacks, and dataclasses-json (only for schemas).
NOT_AT_START = (
    "dataclasses_json",
    "marshmallow",
    "bridge_client.options",
    "bridge_client.template",
    "bridge_client.agent",
    "bridge_client.client",
    "bridge_client.sandbox.docker",
    "bridge_client.sandbox.ssh",
    "bridge_client.sandbox.local",
    "bridge_client.sandbox.wheelhouse",
    "bridge_client.sandbox.npm",
    "tenacity",
    "websocket",
    "requests",
    "paramiko",
)
# A bridge that loses the lock exits before any of the serving stack.
NOT_IN_A_LOSER = NOT_AT_START + (
    "websockets",
    "sqlite3",
    "bridge_client.drivers",
    "bridge_client.bridge.server",
    "bridge_client.bridge.store",
    "bridge_client.bridge.turns",
    "bridge_client.bridge.driver",
    "bridge_client.bridge.recovery",
)


def _start(state: str, workspace: str) -> Tuple[subprocess.Popen, int, str]:
    """Start ``python -X importtime -m bridge_client.bridge`` with a notice pipe; returns the
    process, the pipe's read end and the stderr file."""
    os.makedirs(workspace, exist_ok=True)
    read_end, write_end = os.pipe()
    folder = os.path.dirname(state)
    err = os.path.join(folder, f"stderr-{len(os.listdir(folder))}")
    env = dict(os.environ)
    env[identity.STATE_DIR_ENV] = state
    env[NOTICE_ENV] = str(write_end)
    env["PYTHONPATH"] = os.pathsep.join([REPO, HERE, env.get("PYTHONPATH", "")])
    with open(err, "wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-X", "importtime", "-m", "bridge_client.bridge", "--driver", "echo"],
            cwd=workspace, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=stderr, pass_fds=(write_end,),
        )
    os.close(write_end)
    return proc, read_end, err


def _notice(fd: int, timeout: float = 30.0) -> str:
    data = b""
    while b"\n" not in data:
        ready, _, _ = select.select([fd], [], [], timeout)
        assert ready, "no notice in time"
        chunk = os.read(fd, 256)
        if not chunk:
            break
        data += chunk
    os.close(fd)
    return data.decode().strip()


def _imported(err: str, until: str = "") -> Set[str]:
    """Modules named by ``-X importtime`` in ``err`` (before the first log line with ``until``)."""
    names: Set[str] = set()
    with open(err, encoding="utf-8", errors="replace") as f:
        for line in f:
            if until and until in line:
                break
            if line.startswith("import time:") and "|" in line:
                name = line.rsplit("|", 1)[1].strip()
                names.add(name)
    return names


def _offending(names: Set[str], banned: Tuple[str, ...]) -> List[str]:
    return sorted(n for n in names if any(n == b or n.startswith(b + ".") for b in banned))


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


def test_b01_the_bridge_serves_without_the_host_side_and_says_when_it_listens(tmp_path):
    state = str(tmp_path / "state")
    prepare_state(state)
    proc, fd, err = _start(state, str(tmp_path / "workspace"))
    try:
        assert _notice(fd) == f"listening {bridge_client.__version__}"
        # The listening file is written before the notice: the host reads it at once.
        info = identity.parse_listening(open(os.path.join(state, identity.LISTENING_FILE), "rb").read())
        assert info.pid == proc.pid
        names = _imported(err)
        assert "bridge_client.bridge.server" in names, "the list is the real one"
        assert _offending(names, NOT_AT_START) == []
    finally:
        _stop(proc)


def test_b02_a_bridge_that_loses_the_lock_imports_no_serving_code(tmp_path):
    state = str(tmp_path / "state")
    prepare_state(state)
    winner, winner_fd, _ = _start(state, str(tmp_path / "workspace"))
    try:
        assert _notice(winner_fd).split()[0] == "listening"
        loser, loser_fd, err = _start(state, str(tmp_path / "workspace"))
        assert _notice(loser_fd) == f"locked {bridge_client.__version__}"
        assert loser.wait(timeout=15) == 0
        assert _offending(_imported(err), NOT_IN_A_LOSER) == []
    finally:
        _stop(winner)


def test_c05_a_bridge_that_cannot_start_closes_its_notice_without_a_line(tmp_path):
    state = str(tmp_path / "state")
    os.makedirs(state, mode=0o700)  # no launch.json: a launch problem, exit 2
    proc, fd, _ = _start(state, str(tmp_path / "workspace"))
    try:
        assert _notice(fd) == ""
        assert proc.wait(timeout=15) == 2
    finally:
        _stop(proc)

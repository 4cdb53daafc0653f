"""Hostile surroundings (breaker findings 3, 4, 7 and the orphaned shell command): a stale
listening file whose port is now another bridge's (401), half-sent handshakes that would use
up the bridge's threads and files (B08), a prompt that is not UTF-8, and a shell command left
running by a SIGKILLed bridge."""
from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from typing import List

import pytest

import bridge_client as bc
from bridge_client.bridge import identity
from host_support import _alive, options, session_options
from resilience_support import sigkill_bridge

pytestmark = pytest.mark.timeout(90)


def _listening(sandbox: bc.LocalSandbox, bridge_id: str) -> str:
    return os.path.join(identity.state_dir(sandbox.state_root, bridge_id), identity.LISTENING_FILE)


def _point_at(path: str, port: int) -> None:
    """Rewrite a (stale) listening file so that it names ``port``: the port was reused."""
    with open(path, "rb") as f:
        data = json.loads(f.read())
    data["port"] = port
    identity.secure_write(path, json.dumps(data).encode())


@pytest.fixture
def other(tmp_path, home):
    """Another sandbox (another token) with a running echo bridge; its session, released after."""
    folder = tmp_path / "other"
    folder.mkdir()
    sandbox = bc.LocalSandbox(str(folder))
    session = bc.create_session(options("echo"), session_options(sandbox))
    list(session.turn("other"))
    yield sandbox, session
    session.release()
    from host_support import kill_all_under

    kill_all_under(str(folder))


# ---------------------------------------------------------------------------- finding 3


def test_c04_a_stale_listening_file_whose_port_answers_401_leads_to_a_launch(sandbox, other):
    other_sandbox, other_session = other
    other_port = identity.parse_listening(
        open(_listening(other_sandbox, other_session.bridge_id), "rb").read()
    ).port
    with bc.create_session(options("echo"), session_options(sandbox)) as session:
        list(session.turn("first"))
        dead = sigkill_bridge(sandbox, session.bridge_id)
        _point_at(_listening(sandbox, session.bridge_id), other_port)  # the port was reused
        parts = list(session.turn("after the crash"))
        assert parts[-1].finish_reason == "stop"
        assert session._hello.pid != dead
        info = identity.parse_listening(open(_listening(sandbox, session.bridge_id), "rb").read())
        assert info.port != other_port and _alive(info.pid)
    assert list(other_session.turn("still served"))[-1].finish_reason == "stop"


def test_c04_a_stale_401_mid_turn_relaunches_and_reads_on(sandbox, other):
    other_sandbox, other_session = other
    other_port = identity.parse_listening(
        open(_listening(other_sandbox, other_session.bridge_id), "rb").read()
    ).port
    opts = options("echo", agent_options={"steps": 4, "chunks": 5, "delay": 0.05})
    with bc.create_session(opts, session_options(sandbox, resend_window=20.0)) as session:
        turn = session.turn("victim")
        parts: List[bc.Part] = []
        for part in turn:
            parts.append(part)
            if len(parts) == 5:
                sigkill_bridge(sandbox, session.bridge_id)
                _point_at(_listening(sandbox, session.bridge_id), other_port)
        assert parts[-1].finish_reason == "stop"


def test_c17_the_live_bridge_of_the_state_directory_refusing_the_token_is_unauthorized(sandbox, other):
    # The lock is held (by this test, standing in for a live bridge) and the listening file's
    # port refuses the token: the launched bridge loses the lock, and it is Unauthorized.
    other_sandbox, other_session = other
    other_port = identity.parse_listening(
        open(_listening(other_sandbox, other_session.bridge_id), "rb").read()
    ).port
    session = bc.create_session(options("echo"), session_options(sandbox))
    state = identity.state_dir(sandbox.state_root, session.bridge_id)
    identity.make_private_dirs(state)
    fd = os.open(os.path.join(state, identity.LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        info = identity.ListeningInfo(
            1, "echo", session.bridge_id, "127.0.0.1", other_port, os.getpid(), "live", "2020-01-01T00:00:00Z"
        )
        identity.secure_write(os.path.join(state, identity.LISTENING_FILE), info.to_json().encode())
        with pytest.raises(bc.Unauthorized):
            session.turn("hello")
    finally:
        os.close(fd)
        session.release()


def _bridges_json(sandbox: bc.LocalSandbox) -> list:
    done = subprocess.run(
        [sys.executable, "-m", "bridge_client.cli", "bridges", "--sandbox", sandbox.workdir, "--json"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_bridges_does_not_call_a_dead_bridge_alive_when_its_port_is_another_bridges(sandbox, other):
    other_sandbox, other_session = other
    other_port = identity.parse_listening(
        open(_listening(other_sandbox, other_session.bridge_id), "rb").read()
    ).port
    with bc.create_session(options("echo"), session_options(sandbox)) as session:
        list(session.turn("first"))
        assert [row["alive"] for row in _bridges_json(sandbox)] == [True]
        sigkill_bridge(sandbox, session.bridge_id)
        _point_at(_listening(sandbox, session.bridge_id), other_port)
        assert [row["alive"] for row in _bridges_json(sandbox)] == [False]


# ---------------------------------------------------------------------------- finding 7


def test_cli_a_prompt_that_is_not_utf8_is_bad_input(sandbox):
    done = subprocess.run(
        [sys.executable.encode(), b"-m", b"bridge_client.cli", b"run", b"\xff\xfe abc",
         b"--agent", b"echo", b"--sandbox", sandbox.workdir.encode()],
        capture_output=True, timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert b"not valid UTF-8 (byte 0xff at position 0)" in done.stderr
    assert not os.path.exists(os.path.join(sandbox.state_root, "bridges")), "nothing was launched"

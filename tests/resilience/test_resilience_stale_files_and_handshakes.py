"""Hostile surroundings (and the orphaned shell command): a stale
listening file whose port is now another bridge's (401), half-sent handshakes that would use
up the bridge's threads and files (B08), a prompt that is not UTF-8, and a shell command left
running by a SIGKILLed bridge."""
from __future__ import annotations

import fcntl
import json
import socket
import os
import signal
import subprocess
import sys
from typing import List

import pytest

import bridge_client as bc
from bridge_client.state_dir import identity
from host_support import _alive, options, session_options, wait_until
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


# ---------------------------------------------------------------------------- finding 4 (B08)


def _bridge_options(*extra: str, shell_prefix: str = "", agent_options=None) -> bc.BridgeOptions:
    """Echo bridge options whose bridge program gets ``extra`` arguments (and, with
    ``shell_prefix``, is started by /bin/sh after that prefix, e.g. a ``ulimit``)."""
    base = options("echo", agent_options=agent_options)
    argv = [base.command, *base.args, *extra]
    if shell_prefix:
        command, args = "/bin/sh", ("-c", shell_prefix + ' && exec "$0" "$@"', *argv)
    else:
        command, args = argv[0], tuple(argv[1:])
    return bc.BridgeOptions(
        id=base.id, template=base.template, command=command, args=args, token=base.token,
        agent_options=base.agent_options, bridge_idle_timeout=base.bridge_idle_timeout,
    )


def _half_handshakes(port: int, count: int) -> List[socket.socket]:
    """``count`` TCP connections that send part of an HTTP request and then nothing."""
    opened = []
    for _ in range(count):
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
        except OSError:
            break  # refused or reset by the bridge: fine, the point is what it does after
        opened.append(sock)
    return opened


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_b08_half_sent_handshakes_do_not_lock_out_others_and_threads_stay_bounded(sandbox):
    limit = 24
    opts = _bridge_options("--max-connections", str(limit), "--max-handshakes", "8",
                           "--handshake-timeout", "30")
    with bc.create_session(opts, session_options(sandbox)) as session:
        assert list(session.turn("warm up"))[-1].finish_reason == "stop"
        pid = session._hello.pid
        port = identity.parse_listening(open(_listening(sandbox, session.bridge_id), "rb").read()).port
        slow = _half_handshakes(port, 3 * limit)
        try:
            assert _threads(pid) <= 2 * limit + 20, "each connection costs two threads, no more"
            # A newcomer still gets in (the oldest half-sent handshake makes room) and works.
            with bc.create_session(opts, session_options(sandbox)) as newcomer:
                assert list(newcomer.turn("newcomer"))[-1].finish_reason == "stop"
                assert newcomer._hello.pid == pid
            assert list(session.turn("still here"))[-1].finish_reason == "stop"
            assert _alive(pid) and session._hello.pid == pid
            assert _threads(pid) <= 2 * limit + 20
        finally:
            for sock in slow:
                sock.close()


def test_b08_running_out_of_files_does_not_stop_the_bridge(sandbox):
    # Few files and a connection limit far above what they allow: accept() fails with EMFILE.
    opts = _bridge_options("--max-connections", "500", "--handshake-timeout", "30",
                           shell_prefix="ulimit -n 80")
    with bc.create_session(opts, session_options(sandbox)) as session:
        assert list(session.turn("warm up"))[-1].finish_reason == "stop"
        pid = session._hello.pid
        port = identity.parse_listening(open(_listening(sandbox, session.bridge_id), "rb").read()).port
        slow = _half_handshakes(port, 120)
        try:
            assert wait_until(lambda: _fds(pid) >= 75, timeout=10), "the bridge never ran short of files"
        finally:
            for sock in slow:
                sock.close()
        assert wait_until(lambda: _fds(pid) < 40, timeout=15), "the half-sent handshakes were not closed"
        assert list(session.turn("after the shortage"))[-1].finish_reason == "stop"
        assert _alive(pid) and session._hello.pid == pid, "the same bridge serves on"
        with bc.create_session(opts, session_options(sandbox)) as newcomer:
            assert list(newcomer.turn("newcomer"))[-1].finish_reason == "stop"
            assert newcomer._hello.pid == pid


def test_b08_a_stopping_bridge_does_not_wait_out_half_sent_handshakes(sandbox):
    # The handshake timeout is far longer than the wait below: a bridge that waited for each
    # half-sent request to time out would still be holding its lock.
    opts = _bridge_options("--handshake-timeout", "60")
    session = bc.create_session(opts, session_options(sandbox))
    try:
        assert list(session.turn("warm up"))[-1].finish_reason == "stop"
        pid = session._hello.pid
        port = identity.parse_listening(open(_listening(sandbox, session.bridge_id), "rb").read()).port
        slow = _half_handshakes(port, 10)
        try:
            os.kill(pid, signal.SIGTERM)
            assert wait_until(lambda: not _alive(pid), timeout=15), "the bridge waited for the handshakes"
        finally:
            for sock in slow:
                sock.close()
    finally:
        session.release()


# ---------------------------------------------------------------------------- the orphaned command


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def test_b05_a_sigkilled_bridges_command_does_not_overlap_the_step_run_again(sandbox, workspace):
    # The command notes its start, waits for a `release` file (at most 30 s), notes its end.
    # The bridge is SIGKILLed while it waits; the step runs again in the next bridge. The
    # abandoned command goes on under its keeper and the step run again takes its result
    # instead of starting a second one (C24): once `release` exists the log shows one start
    # and one end. Waiting on a file, not a sleep, keeps a loaded machine from ending the
    # first command before the kill.
    line = (
        "echo $$ >> groups.txt; echo start >> log.txt; i=0; "
        "while [ ! -e release ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; "
        "echo end >> log.txt"
    )
    opts = options("shell")
    with bc.create_session(opts, session_options(sandbox, resend_window=20.0)) as session:
        turn = session.turn(line)
        parts: List[bc.Part] = []
        for part in turn:
            parts.append(part)
            if part.type == "tool-call":
                break
        assert wait_until(lambda: os.path.exists(os.path.join(workspace, "log.txt")), timeout=10)
        with open(os.path.join(workspace, "groups.txt")) as f:
            first_group = int(f.read().split()[0])
        sigkill_bridge(sandbox, session.bridge_id)
        assert _group_alive(first_group), "the command was killed with its bridge"
        open(os.path.join(workspace, "release"), "w").close()
        parts.extend(turn)
        assert parts[-1].finish_reason == "stop"
    with open(os.path.join(workspace, "log.txt")) as f:
        assert f.read().split() == ["start", "end"]
    with open(os.path.join(workspace, "groups.txt")) as f:
        assert f.read().split() == [str(first_group)], "a second command was started"

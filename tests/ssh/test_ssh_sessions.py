"""Sessions on an SSH sandbox against a real OpenSSH server: the bridge installed from wheels
and launched on the remote machine, shared by host processes, and the turn kept through a
killed SSH transport, a SIGKILLed bridge, a removed folder, a host gone, and a host restart."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

import bridge_client as bc
from bridge_client.state_dir import identity
from bridge_client.sandbox.ssh import SSHSandbox
from bridge_client.wire.parts import part_from_dict
from host_support import _alive, options, session_options, wait_until
from resilience_support import check_turn, echo_text
from sshd_server import Relay

pytestmark = pytest.mark.timeout(90)

HOST_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ssh_host.py")


def _listening(sandbox, bridge_id: str) -> identity.ListeningInfo:
    path = os.path.join(identity.state_dir(sandbox.state_root, bridge_id), identity.LISTENING_FILE)
    return identity.parse_listening(sandbox.read_file(path))


def _host(sshd, folder: str, **config) -> "subprocess.Popen[str]":
    config = dict({"host": sshd.host, "folder": folder, "sandbox": sshd.options()}, **config)
    return subprocess.Popen(
        [sys.executable, HOST_SCRIPT, json.dumps(config)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def test_c04_shell_turn_runs_in_the_remote_folder_and_the_bridge_listens_on_its_loopback(
    ssh_sandbox, remote_folder
):
    opts = options("shell", python="python3")
    with bc.create_session(opts, session_options(ssh_sandbox, launch_timeout=60.0)) as session:
        turn = session.turn("echo hello from $(hostname) > made-here.txt\ncat made-here.txt\npwd")
        parts = list(turn)
        assert parts[0].type == "turn-start" and parts[-1].finish_reason == "stop"
        assert remote_folder in turn.text() and "hello from" in turn.text()
        info = _listening(ssh_sandbox, session.bridge_id)
        endpoint = ssh_sandbox.expose(info.port)
    assert os.path.exists(os.path.join(remote_folder, "made-here.txt"))
    assert endpoint.url != f"ws://127.0.0.1:{info.port}/", "the host reaches it through the forwarder"
    launch = identity.parse_launch(ssh_sandbox.read_file(
        os.path.join(identity.state_dir(ssh_sandbox.state_root, session.bridge_id), identity.LAUNCH_FILE)))
    assert launch.bind == "127.0.0.1"


def test_c05_two_host_processes_share_one_remote_bridge(sshd, remote_folder, home):
    config = {"driver": "echo", "agent_options": {"steps": 2, "delay": 0.05}, "mode": "run"}
    hosts = [_host(sshd, remote_folder, prompt=f"host {i} ", **config) for i in range(2)]
    answers = []
    for host in hosts:
        out, err = host.communicate(timeout=80)
        assert host.returncode == 0, err[-3000:]
        answers.append(json.loads(out.strip().splitlines()[-1]))
    assert answers[0]["bridge_id"] == answers[1]["bridge_id"]
    assert (answers[0]["pid"], answers[0]["instance"]) == (answers[1]["pid"], answers[1]["instance"])
    assert [a["text"] for a in answers] == ["host 0 host 0 ", "host 1 host 1 "]


def test_c09_ssh_transport_killed_mid_turn_and_the_read_resumes_with_nothing_lost(ssh_sandbox, sshd):
    steps = 12
    opts = options("echo", python="python3", agent_options={"steps": steps, "chunks": 3, "delay": 0.03})
    with bc.create_session(opts, session_options(ssh_sandbox, launch_timeout=60.0)) as session:
        turn = session.turn("abc ")
        parts = []
        killed = []
        for part in turn:
            parts.append(part)
            if not killed and turn.steps == 3:
                instance = session._hello.instance
                killed = sshd.kill_connections()
                assert killed, "an sshd child served the connection"
        assert killed
        assert not any(_alive(p) for p in killed)
        check_turn(parts, steps=steps)
        assert turn.text() == echo_text("abc ", steps)
        assert all(p.attempt == 1 for p in parts if isinstance(p, bc.StepStart)), "no step ran again"
        assert session._hello.instance == instance, "the same bridge went on: only the transport died"
        assert set(sshd.connection_pids()).isdisjoint(killed), "the host connected again"


def test_b05_bridge_sigkilled_on_the_remote_side_and_the_turn_goes_on(ssh_sandbox):
    steps = 6
    opts = options("echo", python="python3", agent_options={"steps": steps, "chunks": 2, "delay": 0.05})
    with bc.create_session(opts, session_options(ssh_sandbox, launch_timeout=60.0)) as session:
        turn = session.turn("xy ")
        parts = []
        pid = None
        for part in turn:
            parts.append(part)
            if pid is None and turn.steps == 2:
                pid = _listening(ssh_sandbox, session.bridge_id).pid
                assert ssh_sandbox.exec(["kill", "-9", str(pid)]).ok
        assert pid is not None and not _alive(pid)
        check_turn(parts, steps=steps)  # every step once, a repeated one after its step-reset
        assert _listening(ssh_sandbox, session.bridge_id).pid != pid, "a new bridge was launched"
        assert turn.text().endswith("xy ")


def test_c15_removed_remote_folder_gives_bridge_unavailable_with_the_last_state(ssh_sandbox, remote_folder):
    opts = options("echo", python="python3", agent_options={"steps": 20, "chunks": 2, "delay": 0.05})
    session = bc.create_session(opts, session_options(ssh_sandbox, launch_timeout=60.0, resend_window=5.0))
    list(session.turn("first"))
    turn = session.turn("second")
    next(turn)
    last = session.state
    pid = _listening(ssh_sandbox, session.bridge_id).pid
    shutil.rmtree(remote_folder)
    os.kill(pid, signal.SIGTERM)  # a running bridge needs no folder; launching another does
    assert wait_until(lambda: not _alive(pid), timeout=10.0)
    with pytest.raises(bc.BridgeUnavailable) as caught:
        for _ in turn:
            pass
    assert "gone" in str(caught.value)
    assert caught.value.state == last
    assert session.release() == last


def test_c15_an_ssh_host_that_stops_answering_gives_bridge_unavailable_after_the_window(
    sshd, remote_folder, tmp_path, home
):
    relay = Relay(sshd.port)
    known = tmp_path / "known_hosts"
    known.write_text(open(sshd.known_hosts).read().replace(f"]:{sshd.port} ", f"]:{relay.port} "))
    sandbox = SSHSandbox(sshd.host, remote_folder, **dict(
        sshd.options(), port=relay.port, known_hosts=str(known), reconnect_window=2.0, keepalive=1.0))
    try:
        opts = options("echo", python="python3", agent_options={"steps": 50, "delay": 0.05})
        session = bc.create_session(opts, session_options(sandbox, launch_timeout=60.0, resend_window=20.0))
        turn = session.turn("gone soon ")
        next(turn)
        next(turn)
        last = session.state
        relay.cut()
        started = time.monotonic()
        with pytest.raises(bc.BridgeUnavailable) as caught:
            for _ in turn:
                pass
        assert time.monotonic() - started < 15.0, "the sandbox is gone after its reconnect window"
        assert "does not answer" in str(caught.value) or "stopped answering" in str(caught.value)
        assert caught.value.state == last
    finally:
        sandbox.close()


def test_c10_c12_a_restarted_host_continues_from_turn_start(sshd, remote_folder, home):
    steps = 8
    agent = {"steps": steps, "chunks": 2, "delay": 0.1}
    first = _host(sshd, remote_folder, driver="echo", agent_options=agent, prompt="again ", mode="start")
    try:
        turn_start = first.stdout.readline()
        assert turn_start, first.stderr.read()[-3000:]
        for _ in range(4):
            first.stdout.readline()
    finally:
        first.kill()  # the host dies mid-turn: all another host has is the turn-start JSON
        first.communicate(timeout=10)
    second = _host(sshd, remote_folder, driver="echo", agent_options=agent, mode="continue", state=turn_start)
    out, err = second.communicate(timeout=80)
    assert second.returncode == 0, err[-3000:]
    lines = out.strip().splitlines()
    parts = [part_from_dict(json.loads(line)) for line in lines[:-1]]
    check_turn(parts, steps=steps)
    assert parts[0].turn == part_from_dict(json.loads(turn_start)).turn
    assert json.loads(lines[-1]) == {"text": echo_text("again ", steps), "steps": steps}


def test_c15_an_ssh_host_that_goes_silent_gives_bridge_unavailable_in_bounded_time(
    sshd, remote_folder, tmp_path, home
):
    relay = Relay(sshd.port)
    known = tmp_path / "known_hosts"
    known.write_text(open(sshd.known_hosts).read().replace(f"]:{sshd.port} ", f"]:{relay.port} "))
    sandbox = SSHSandbox(sshd.host, remote_folder, **dict(
        sshd.options(), port=relay.port, known_hosts=str(known), reconnect_window=2.0,
        connect_timeout=1.0, timeout=1.0))
    try:
        opts = options("echo", python="python3", agent_options={"steps": 50, "delay": 0.05})
        session = bc.create_session(opts, session_options(sandbox, launch_timeout=60.0, resend_window=20.0))
        turn = session.turn("silent soon ")
        next(turn)
        next(turn)
        last = session.state
        relay.freeze()  # nothing is closed: every packet, old connection or new, goes nowhere
        started = time.monotonic()
        with pytest.raises(bc.BridgeUnavailable) as caught:
            for _ in turn:
                pass
        assert time.monotonic() - started < 20.0, "pings, one SFTP timeout and the reconnect window"
        assert caught.value.state == last
    finally:
        relay.cut()
        sandbox.close()

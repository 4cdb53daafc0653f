"""The bridge program: startup checks, listening file (B01), lock (B02, C05), idle exit (B06),
clean shutdown."""
from __future__ import annotations

import json
import os
import signal
import stat
import time

import pytest

from bridge_client.state_dir import identity
from bridge_harness import TOKEN, BridgeProcess, prepare_state, wait_until

pytestmark = pytest.mark.timeout(60)


def _run_to_exit(tmp_path, driver="echo", env=None, **state_kw):
    state = str(tmp_path / "state")
    if state_kw.pop("prepare", True):
        prepare_state(state, **state_kw)
    bridge = BridgeProcess(state, str(tmp_path / "ws"), driver, env=env)
    os.makedirs(state, exist_ok=True)
    bridge.spawn()
    code = bridge.wait(10)
    return code, bridge.log()


# ---------------------------------------------------------------------------- launch errors


def test_missing_state_dir_env_exits_2(tmp_path):
    code, log = _run_to_exit(tmp_path, env={identity.STATE_DIR_ENV: ""})
    assert code == 2
    assert "BRIDGE_CLIENT_STATE_DIR" in log


def test_missing_launch_file_exits_2(tmp_path):
    code, log = _run_to_exit(tmp_path, prepare=False)
    assert code == 2
    assert "launch.json" in log and len(log.strip().splitlines()) == 1


def test_missing_token_exits_2(tmp_path):
    code, log = _run_to_exit(tmp_path, token=None)
    assert code == 2
    assert "token" in log


def test_unknown_driver_exits_2(tmp_path):
    code, log = _run_to_exit(tmp_path, driver="nope")
    assert code == 2
    assert "unknown driver 'nope'" in log


def test_driver_import_error_exits_2(tmp_path):
    code, log = _run_to_exit(tmp_path, driver="no_such_module_xyz:make")
    assert code == 2
    assert "cannot import driver module 'no_such_module_xyz'" in log


def test_driver_options_error_exits_2_naming_it(tmp_path):
    code, log = _run_to_exit(tmp_path, options={"steps": "two"})
    assert code == 2
    assert "steps" in log and "ValueError" in log


def test_agent_id_mismatch_exits_2(tmp_path):
    code, log = _run_to_exit(tmp_path, agent_id="someone-else")
    assert code == 2
    assert "someone-else" in log


def test_bad_launch_file_exits_2(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "launch.json").write_text("{not json")
    (state / "token").write_text(TOKEN)
    code, log = _run_to_exit(tmp_path, prepare=False)
    assert code == 2
    assert "launch" in log


# ---------------------------------------------------------------------------- B01


def test_b01_listening_file_written_atomically_0600_and_removed_on_clean_exit(make_bridge):
    bridge = make_bridge()
    info = bridge.info
    assert info.pid == bridge.proc.pid
    assert info.agent_id == "echo" and info.host == "127.0.0.1" and info.port > 0
    assert len(info.instance) == 32
    assert info.started_at.endswith("Z") and "T" in info.started_at
    mode = stat.S_IMODE(os.stat(bridge.listening_path).st_mode)
    assert mode == 0o600
    assert stat.S_IMODE(os.stat(bridge.state).st_mode) == 0o700
    # no temporary files left behind
    assert not [n for n in os.listdir(bridge.state) if n.startswith(".tmp-")]
    with bridge.connect() as c:
        hello = c.value("Hello")
    assert hello["instance"] == info.instance and hello["startedAt"] == info.started_at
    bridge.signal(signal.SIGTERM)
    assert bridge.wait(10) == 0
    assert not os.path.exists(bridge.listening_path)


def test_b01_instance_is_new_at_every_start(make_bridge, tmp_path):
    first = make_bridge()
    instance = first.info.instance
    assert first.stop() == 0
    second = make_bridge(state=first.state)
    assert second.info.instance != instance


def test_b01_listening_file_of_another_instance_is_left_alone(make_bridge):
    bridge = make_bridge()
    other = identity.ListeningInfo(1, "echo", "x" * 32, "127.0.0.1", 1, 1, "another-instance", "t")
    identity.secure_write(bridge.listening_path, other.to_json().encode())
    assert bridge.stop() == 0
    assert identity.parse_listening(open(bridge.listening_path, "rb").read()).instance == "another-instance"


def test_sigint_exits_cleanly_too(make_bridge):
    bridge = make_bridge()
    bridge.signal(signal.SIGINT)
    assert bridge.wait(10) == 0
    assert not os.path.exists(bridge.listening_path)


def test_environment_is_scrubbed_and_token_never_logged(make_bridge, sid, tid):
    bridge = make_bridge(driver="shell")
    with bridge.connect() as c:
        c.open(sid)
        c.start(sid, tid, "env")
        from bridge_harness import text_of

        parts, _, _ = c.read(sid, tid)
    env_text = text_of(parts)
    assert "BRIDGE_CLIENT_" not in env_text
    assert TOKEN not in env_text
    bridge.stop()
    assert TOKEN not in bridge.log()


# ---------------------------------------------------------------------------- B02 / C05


def test_b02_c05_second_bridge_on_same_state_dir_exits_0_and_first_keeps_serving(make_bridge):
    first = make_bridge()
    second = BridgeProcess(first.state, first.workspace, "echo").spawn()
    assert second.wait(10) == 0
    assert "another bridge holds the lock" in first.log()
    # The winner still serves and its listening file still names it.
    info = identity.parse_listening(open(first.listening_path, "rb").read())
    assert info.instance == first.info.instance
    with first.connect() as c:
        assert c.value("Hello")["instance"] == first.info.instance


def test_b02_c05_two_bridges_launched_at_once_end_up_one(tmp_path):
    state = str(tmp_path / "state")
    prepare_state(state)
    bridges = [BridgeProcess(state, str(tmp_path / "ws")).spawn() for _ in range(3)]
    try:
        losers = wait_until(lambda: [b for b in bridges if b.proc.poll() is not None], 10)
        wait_until(lambda: len([b for b in bridges if b.proc.poll() is not None]) == 2, 10)
        exited = [b for b in bridges if b.proc.poll() is not None]
        assert len(exited) == 2 and all(b.proc.returncode == 0 for b in exited), losers
        (winner,) = [b for b in bridges if b.proc.poll() is None]
        info = winner.wait_listening()
        with winner.connect() as c:
            assert c.value("Hello")["pid"] == info.pid
    finally:
        for b in bridges:
            b.stop()


def test_b02_lock_is_held_while_running(make_bridge):
    import fcntl

    bridge = make_bridge()
    fd = os.open(os.path.join(bridge.state, identity.LOCK_FILE), os.O_RDWR)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        bridge.stop()
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released at exit
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------- B06


def test_b06_idle_bridge_exits_cleanly(make_bridge):
    bridge = make_bridge(idle_timeout=0.5)
    t0 = time.monotonic()
    assert bridge.wait(10) == 0
    assert time.monotonic() - t0 < 5
    assert not os.path.exists(bridge.listening_path)
    assert "idle" in bridge.log()


def test_b06_no_idle_exit_while_a_connection_is_open(make_bridge):
    bridge = make_bridge(idle_timeout=0.5)
    with bridge.connect() as c:
        time.sleep(1.2)
        assert bridge.proc.poll() is None
        c.value("Hello")
    # once the connection closed, the idle time counts again
    assert bridge.wait(10) == 0


def test_b06_no_idle_exit_while_a_turn_runs(make_bridge, sid, tid):
    bridge = make_bridge(idle_timeout=0.5, options={"steps": 1, "delay": 0.3})
    with bridge.connect() as c:
        c.open(sid)
        c.start(sid, tid, "one two three four")  # 6 parts x 0.3 s = about 1.8 s
    time.sleep(1.2)
    assert bridge.proc.poll() is None, "exited while a turn was running"
    assert bridge.wait(10) == 0
    # the turn finished before the idle exit
    with open(os.path.join(bridge.state, "bridge.log")) as f:
        assert f"turn {tid} finished" in f.read()


def test_healthz_and_401_do_not_count_as_connections_for_idle(make_bridge):
    import urllib.request

    bridge = make_bridge(idle_timeout=0.7)
    with urllib.request.urlopen(f"http://127.0.0.1:{bridge.info.port}/healthz", timeout=5) as r:
        assert json.loads(r.read())["protocol"] == 1
    assert bridge.wait(10) == 0


def test_the_bridge_hands_the_gil_over_within_half_a_millisecond(make_bridge, sid, tid):
    # A fast driver must not keep the thread that takes a reader's Ack waiting the default
    # 5 ms for the GIL: the bridge program sets a shorter switch interval.
    from bridge_client.bridge.__main__ import SWITCH_INTERVAL
    from bridge_harness import text_of

    bridge = make_bridge(driver="bridge_test_drivers:make_switch", agent_id="switch")
    with bridge.connect() as c:
        c.open(sid)
        c.start(sid, tid, "say")
        parts, _, _ = c.read(sid, tid)
    assert float(text_of(parts)) == pytest.approx(SWITCH_INTERVAL) and SWITCH_INTERVAL < 0.005

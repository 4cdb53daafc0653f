"""A full disk under the bridge's state directory: a real tmpfs filled
to its last block (or all but a few), real bridge processes.

What is promised (docs/resilience.md, "A full disk"): the reader gets
``BridgeLaunchError(unwritable=True)`` within a second or two of the failure, not after the
resend window (C08: a full disk is no crash a relaunch gets past); nothing committed is lost
(B03: the store keeps its ``-wal`` and its generation, B10: it is not moved aside); once
space is back, iterating the turn reads on (C09, C13: each part once, the cut step again) and
a new turn runs. A SIGKILLed bridge with space is still relaunched and read on (C08)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import bridge_client as bc
from bridge_client.state_dir import identity
from bridge_client.bridge.recovery import open_store
from bridge_client.bridge.store import Store
from bridge_client.bridge.store.ops import Op
from bridge_client.state_dir.unwritable import UNWRITABLE_EXIT
from bridge_harness import prepare_state
from full_disk import FullDisk
from host_support import kill_all_under, options, session_options
from resilience_support import check_turn, sigkill_bridge

pytestmark = pytest.mark.timeout(120)

PROMPT = "one two three four five six seven eight nine ten "
STEPS = 4
# 43 parts a step (step-start, tool-call, tool-result, 40 text deltas, step-finish), 0.01 s
# apart: the turn runs about 2 s, so it is mid-step when the disk fills.
ECHO = {"steps": STEPS, "chunks": 40, "delay": 0.01}
PROMPT_ERROR_BOUND = 3.0  # seconds: "within a second or two", with room for a loaded machine
WINDOW = 30.0  # the default resend window: what the reader waited before


@pytest.fixture
def disk(tmp_path, workspace):
    mounted = FullDisk(str(tmp_path / "full"))
    yield mounted
    kill_all_under(workspace)  # the bridges first: a busy tmpfs does not unmount
    mounted.unmount()


@pytest.fixture
def on_disk(disk, workspace) -> bc.LocalSandbox:
    """A sandbox whose home (and so every state directory) is on the tmpfs."""
    return bc.LocalSandbox(workspace, home=disk.path)


def _session(sandbox):
    opts = options("echo", agent_options=ECHO)
    return bc.create_session(opts, session_options(sandbox, resend_window=WINDOW))


def _read_until_error(turn, parts):
    """Read on until an error; return it with the seconds it took."""
    started = time.monotonic()
    with pytest.raises(bc.BridgeLaunchError) as caught:
        for part in turn:
            parts.append(part)
    return caught.value, time.monotonic() - started


def _no_store_moved_aside(sandbox, bridge_id):
    folder = identity.state_dir(sandbox.state_root, bridge_id)
    damaged = [name for name in os.listdir(folder) if ".damaged-" in name]
    assert damaged == [], f"the store was moved aside: {damaged}"


@pytest.mark.parametrize("leave", [0, 2, 16], ids=["full", "2-blocks-left", "16-blocks-left"])
def test_c08_b03_full_disk_mid_turn_is_a_prompt_unwritable_error_and_the_read_goes_on(disk, on_disk, leave):
    with _session(on_disk) as session:
        turn = session.turn(PROMPT)
        parts = []
        for part in turn:
            parts.append(part)
            if part.index == 60:  # mid step 1
                break
        generation = turn.state.generation
        disk.fill(leave_blocks=leave)
        error, seconds = _read_until_error(turn, parts)
        assert error.unwritable, error
        assert "cannot be written" in str(error) and "Nothing the bridge committed is lost" in str(error)
        assert seconds < PROMPT_ERROR_BOUND, f"the error took {seconds:.1f} s (window {WINDOW:g} s)"
        assert not session.released, "a full disk does not release the session"
        # Requests meanwhile fail the same way, at once: a cancel, a new turn (which suspends
        # this one; iterating it again resumes it).
        for request in (session.cancel_turn, lambda: session.turn("meanwhile ")):
            started = time.monotonic()
            with pytest.raises(bc.BridgeLaunchError) as also:
                request()
            assert also.value.unwritable, also.value
            assert time.monotonic() - started < PROMPT_ERROR_BOUND

        disk.free()
        parts.extend(turn)  # iterating again reads on: a whole new window
        check_turn(parts, steps=STEPS)
        assert turn.text() == PROMPT * STEPS
        assert session._hello.generation == generation, "the same store (B10): nothing committed was lost"
        _no_store_moved_aside(on_disk, session.bridge_id)
        again = list(session.turn("again "))
        assert again[-1].type == "turn-finish" and again[-1].finish_reason == "stop"


def test_c13_sigkilled_bridge_on_a_full_disk_is_a_prompt_unwritable_error_then_resumes(disk, on_disk):
    with _session(on_disk) as session:
        turn = session.turn(PROMPT)
        parts = []
        for part in turn:
            parts.append(part)
            if part.index == 60:
                break
        sigkill_bridge(on_disk, session.bridge_id)
        # One block left: the host can still write launch.json and token (each a new file
        # renamed over the old one), and the bridge it launches cannot open its store.
        disk.fill(leave_blocks=1)
        error, seconds = _read_until_error(turn, parts)
        assert error.unwritable, error
        assert seconds < PROMPT_ERROR_BOUND, f"the error took {seconds:.1f} s (window {WINDOW:g} s)"
        # Not the host's own write of the launch files (that error comes from an OSError):
        # the launched bridge exited 3 and the launcher believed it at once.
        assert not isinstance(error.__cause__, OSError), error.__cause__
        disk.free()
        parts.extend(turn)
        final = check_turn(parts, steps=STEPS)
        assert final[1] == 2, "the step cut by the kill runs again, with a higher attempt"
        assert turn.text() == PROMPT * STEPS
        _no_store_moved_aside(on_disk, session.bridge_id)


def test_c08_sigkilled_bridge_with_space_is_still_relaunched_and_read_on(disk, on_disk):
    """The transient case keeps C08/C13: no error, the read goes on in a new bridge."""
    with _session(on_disk) as session:
        turn = session.turn(PROMPT)
        parts = []
        for part in turn:
            parts.append(part)
            if part.index == 60:
                old = sigkill_bridge(on_disk, session.bridge_id)
        final = check_turn(parts, steps=STEPS)
        assert final[1] == 2
        assert session._hello.pid != old


@pytest.mark.parametrize("leave", [0, 4], ids=["full", "4-blocks-left"])
def test_c08_first_launch_on_a_full_disk_is_a_prompt_unwritable_error(disk, on_disk, leave):
    """Full: the host cannot write the launch files; 4 blocks left: it can, and the bridge
    it launched cannot open its store (exit 3)."""
    session = _session(on_disk)
    try:
        disk.fill(leave_blocks=leave)
        started = time.monotonic()
        with pytest.raises(bc.BridgeLaunchError) as caught:
            session.turn(PROMPT)
        seconds = time.monotonic() - started
        assert caught.value.unwritable, caught.value
        assert seconds < PROMPT_ERROR_BOUND + 2.0, f"{seconds:.1f} s"  # a first launch: an interpreter start
        disk.free()
        done = list(session.turn(PROMPT))
        assert done[-1].type == "turn-finish" and done[-1].finish_reason == "stop"
    finally:
        session.release()


def test_b03_bridge_on_a_full_disk_exits_3_and_says_why_on_its_notice_pipe(disk, tmp_path):
    state = os.path.join(disk.path, "state")
    prepare_state(state)
    disk.fill()
    read_end, write_end = os.pipe()
    env = dict(os.environ, **{identity.STATE_DIR_ENV: state, "BRIDGE_CLIENT_NOTICE_FD": str(write_end)})
    work = tmp_path / "bridge-work"
    work.mkdir()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bridge_client.bridge", "--driver", "echo"],
            cwd=str(work),
            env=env,
            pass_fds=(write_end,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        os.close(write_end)
        write_end = -1
        try:
            _, stderr = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)
        notice = os.read(read_end, 4096).decode()
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)
    assert proc.returncode == UNWRITABLE_EXIT, stderr.decode(errors="replace")
    assert notice.startswith("unwritable "), notice
    assert notice.strip() != "unwritable", "the notice names the reason"


def _op(i):
    return Op("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (f"row-{i}", "x" * 1500))


@pytest.mark.parametrize("leave", [0, 2], ids=["full", "2-blocks-left"])
def test_b03_b10_store_whose_write_failed_on_a_full_disk_keeps_its_wal_and_generation(disk, leave):
    path = os.path.join(disk.path, identity.STORE_FILE)
    failures = []
    store = Store(path, on_fatal=failures.append)
    generation = store.generation
    committed = 0
    store.wait(store.submit(_op(committed)))
    committed += 1
    disk.fill(leave_blocks=leave)
    while not failures:
        try:
            store.wait(store.submit(_op(committed)))
        except Exception:
            break
        committed += 1
    assert failures, "the full disk failed a write"
    store.close()
    assert os.path.exists(path + "-wal"), "the failed store kept its -wal for the next bridge"
    disk.free()
    opened = open_store(path)
    try:
        assert opened.moved is None, opened.reason
        assert opened.store.generation == generation
        rows = opened.store._reader.execute("SELECT count(*) FROM meta WHERE key LIKE 'row-%'").fetchone()[0]
        assert rows == committed, "every committed write is there"
    finally:
        opened.store.close()

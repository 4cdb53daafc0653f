"""A full disk freed by less than the store's ``-wal`` (issue 27, item 5), on a real 2 MiB tmpfs
with real bridge processes: a turn runs until its ``-wal`` holds 1.2 MB, the disk fills (the
host raises the unwritable error), 700 KB are freed. A bridge start must then leave the freed
space as it found it: it serves with the ``-wal`` as it is (no checkpoint that does not fit),
or, when it cannot start, fails with how much space it needs; the free space never shrinks
across starts that fail, and once there is room the turn reads on and a new turn runs."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import bridge_client as bc
from bridge_client.state_dir import identity
from bridge_client.bridge.store.space import MARGIN
from bridge_client.state_dir.unwritable import UNWRITABLE_EXIT
from bridge_harness import prepare_state
from full_disk import BLOCK, FullDisk
from host_support import kill_all_under, options, session_options
from resilience_support import check_turn

pytestmark = pytest.mark.timeout(180)

WAL_HELD = 1_200_000  # bytes in the -wal when the disk fills
FREED = 700 * 1024  # bytes freed afterwards: less than the -wal
PROMPT = "".join(f"w{i:04d} " for i in range(120))  # 720 characters a step
STEPS = 60
ECHO = {"steps": STEPS, "chunks": 24, "delay": 0.002}


@pytest.fixture
def disk(tmp_path, workspace):
    # 8 MiB while the bridge opens its store (a -wal of 1.2 MB needs room for it: the store
    # sizes its automatic checkpoints by the free space), then 2 MiB once the turn runs.
    mounted = FullDisk(str(tmp_path / "small"), size="8m")
    yield mounted
    kill_all_under(workspace)
    mounted.unmount()


def _wal(sandbox, session) -> str:
    folder = identity.state_dir(sandbox.state_root, session.bridge_id)
    return os.path.join(folder, identity.STORE_FILE + "-wal")


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def test_b03_c08_a_disk_freed_by_less_than_the_wal_serves_again_and_never_refills(disk, workspace):
    sandbox = bc.LocalSandbox(workspace, home=disk.path)
    opts = options("echo", agent_options=ECHO)
    with bc.create_session(opts, session_options(sandbox, resend_window=30.0)) as session:
        turn = session.turn(PROMPT)
        wal = _wal(sandbox, session)
        disk.resize("2m")
        parts = []
        for part in turn:
            parts.append(part)
            if _size(wal) >= WAL_HELD:
                break
        else:
            pytest.fail(f"the turn ended with a -wal of {_size(wal)} bytes")
        disk.fill()
        with pytest.raises(bc.BridgeLaunchError) as caught:
            for part in turn:
                parts.append(part)
        assert caught.value.unwritable, caught.value
        assert _size(wal) >= WAL_HELD
        disk.free_some(FREED)
        freed = disk.free_bytes()
        assert freed < _size(wal), "freed less than the -wal holds"
        # Start again, three times: each either serves (the turn reads on; it may fill the
        # disk again with its own new parts, which is no failed start) or fails saying how
        # much space the store needs, and leaves the free space as it found it.
        served = 0
        for _ in range(3):
            before = disk.free_bytes()
            try:
                for part in turn:
                    parts.append(part)
                    served += 1
                break  # the turn finished
            except bc.BridgeLaunchError as exc:
                assert exc.unwritable, exc
                if served == 0:
                    assert "needs about" in str(exc) and "KiB" in str(exc), str(exc)
                    assert disk.free_bytes() >= before, "a failed start took space"
        assert served > 0, "a bridge served the turn on after space was freed"
        disk.free()
        parts.extend(turn)
        check_turn(parts, steps=STEPS)
        assert turn.text() == PROMPT * STEPS
        again = list(session.turn("again "))
        assert again[-1].type == "turn-finish" and again[-1].finish_reason == "stop"


def _start_bridge(state: str, work: str) -> "tuple[int, str]":
    """Run a bridge on ``state`` until it exits or serves; return (status or 0, its stderr)."""
    read_end, write_end = os.pipe()
    env = dict(os.environ, **{identity.STATE_DIR_ENV: state, "BRIDGE_CLIENT_NOTICE_FD": str(write_end)})
    proc = subprocess.Popen(
        [sys.executable, "-m", "bridge_client.bridge", "--driver", "echo"],
        cwd=work,
        env=env,
        pass_fds=(write_end,),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    os.close(write_end)
    try:
        notice = b""
        while True:  # the notice pipe: "listening ..." or "unwritable ..." or closed
            chunk = os.read(read_end, 4096)
            if not chunk or b"\n" in chunk or chunk.startswith((b"listening", b"unwritable")):
                notice += chunk
                break
            notice += chunk
    finally:
        os.close(read_end)
    if notice.startswith(b"listening"):
        proc.terminate()
        proc.communicate(timeout=30)
        return 0, notice.decode()
    _, stderr = proc.communicate(timeout=30)
    return proc.returncode, notice.decode() + stderr.decode(errors="replace")


def test_b03_a_start_with_too_little_room_says_how_much_and_takes_nothing(disk, tmp_path):
    """The unavoidable case: a store with a big -wal on a disk with less than the bridge needs
    to start. Every start fails with how much it needs (the notice pipe's reason, which is
    what the host raises), and the free space is the same after each."""
    state, store, work = _big_wal(disk, tmp_path)
    disk.fill()
    disk.free_some(MARGIN // 2)
    for _ in range(3):
        before = disk.free_bytes()
        code, out = _start_bridge(state, work)
        assert code == UNWRITABLE_EXIT, out
        assert "unwritable" in out and "needs about" in out and "KiB" in out, out
        assert disk.free_bytes() >= before - BLOCK, f"a failed start took {before - disk.free_bytes()} bytes"
        assert _size(store + "-wal") >= WAL_HELD, "the -wal is kept as it was"


def test_b03_a_wal_whose_checkpoint_does_not_fit_is_served_as_it_is(disk, tmp_path):
    """1.2 MB of new pages in the -wal, 700 KB free: the checkpoint cannot fit, so the bridge
    serves without it, and stops (SIGTERM) without it; the free space is as it was."""
    state, store, work = _big_wal(disk, tmp_path)
    disk.fill()
    disk.free_some(FREED)
    for _ in range(2):
        before = disk.free_bytes()
        code, out = _start_bridge(state, work)
        assert code == 0, out  # it served (was listening), then stopped cleanly
        assert disk.free_bytes() >= before - 2 * BLOCK, f"the start took {before - disk.free_bytes()} bytes"
        assert _size(store + "-wal") >= WAL_HELD
    disk.free()
    disk.resize("8m")  # the 2 MiB disk cannot hold the file and the -wal's pages at once
    code, out = _start_bridge(state, work)  # with room: checkpointed and emptied
    assert code == 0, out
    assert _size(store + "-wal") < WAL_HELD


def _big_wal(disk, tmp_path) -> "tuple[str, str, str]":
    """A state folder on ``disk`` whose store's -wal holds 1.2 MB of new pages (as a bridge
    SIGKILLed mid-turn leaves it); returns (state, store, bridge work folder)."""
    state = os.path.join(disk.path, "state")
    prepare_state(state)
    store = os.path.join(state, identity.STORE_FILE)
    work = str(tmp_path / "work")
    os.mkdir(work)
    code, out = _start_bridge(state, work)  # a first start makes the store
    assert code == 0, out
    filler = (
        "import os, sys\n"
        "from bridge_client.bridge.store import Store, turn_op\n"
        "s = Store(sys.argv[1])\n"
        "i = 0\n"
        "while os.path.getsize(sys.argv[1] + '-wal') < %d:\n"
        "    s.wait(s.submit(turn_op('t%%d' %% i, 's', os.urandom(20000).hex(), 'x', {}, {})))\n"
        "    i += 1\n"
        "os._exit(0)\n" % WAL_HELD
    )
    done = subprocess.run([sys.executable, "-c", filler, store], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    disk.resize("2m")
    return state, store, work

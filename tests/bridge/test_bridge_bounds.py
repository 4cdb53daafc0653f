"""Bounded work (B09) and bounded revisions (B03): a connection cannot exhaust the bridge's
threads, honest load in a small task limit works, and a session state near the integer limit
is refused where it is opened."""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import sqlite3
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest
import websocket

import bridge_client as bc
from bridge_client.state_dir import identity
from bridge_client.wire import frames
from bridge_client.wire.parts import MAX_OPEN_REVISION, MAX_SAFE_INTEGER
from bridge_harness import BridgeProcess, WireClient, prepare_state, text_of, wait_until
from host_support import options, session_options

pytestmark = pytest.mark.timeout(90)

TASKS = 128  # the sandbox's task limit (RLIMIT_NPROC) in these tests


_CGROUP_PIDS = "/sys/fs/cgroup/pids"


def _task_cgroup() -> str:
    """A fresh cgroup (v1 ``pids`` controller) with ``pids.max`` = :data:`TASKS`, as a
    container's ``--pids-limit`` makes: every thread and process of the bridge counts.
    (``RLIMIT_NPROC`` would count every task of the user, and not apply to root.)"""
    if not os.path.isdir(_CGROUP_PIDS):
        pytest.skip(f"no cgroup pids controller at {_CGROUP_PIDS} to give the bridge a task limit")
    path = os.path.join(_CGROUP_PIDS, f"bridge-client-test-{os.getpid()}-{time.monotonic_ns()}")
    try:
        os.mkdir(path)
        with open(os.path.join(path, "pids.max"), "w") as f:
            f.write(str(TASKS))
    except OSError as exc:
        pytest.skip(f"cannot make a cgroup with a task limit ({exc}): needs a writable {_CGROUP_PIDS}")
    return path


@pytest.fixture
def limited_bridge(tmp_path) -> Iterator[Callable[..., BridgeProcess]]:
    """``make(options=None, args=())``: a bridge in a cgroup of :data:`TASKS` tasks at most;
    stopped by pid afterwards, and the cgroup removed."""
    cgroup = _task_cgroup()
    made: List[BridgeProcess] = []

    def preexec() -> None:
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    def make(options: Any = None, args: Any = ()) -> BridgeProcess:
        state = str(tmp_path / f"limited-state-{len(made)}")
        prepare_state(state, options=options)
        workspace = str(tmp_path / f"limited-ws-{len(made)}")
        bridge = BridgeProcess(state, workspace, "echo", args=args, preexec=preexec)
        made.append(bridge)
        return bridge.start(timeout=20)

    try:
        yield make
    finally:
        for bridge in made:
            bridge.stop()
        wait_until(lambda: not open(os.path.join(cgroup, "cgroup.procs")).read().strip(), 5)
        try:
            os.rmdir(cgroup)
        except OSError:
            pass


def _first_answers(c: WireClient, ids: List[str], timeout: float) -> Dict[str, Dict[str, Any]]:
    """The first message for each request id (a Chunk or an Exit), within ``timeout``."""
    c.ws.settimeout(timeout)
    first: Dict[str, Dict[str, Any]] = {}
    deadline = time.monotonic() + timeout
    while len(first) < len(ids) and time.monotonic() < deadline:
        message = c.recv()
        rid = message.get("requestId")
        assert message["_tag"] != "Defect", message
        if rid in ids and rid not in first:
            first[rid] = message
    return first


def _failure_tag(message: Dict[str, Any]) -> Optional[str]:
    if message["_tag"] != "Exit" or message["exit"]["_tag"] != "Failure":
        return None
    cause = message["exit"]["cause"][0]
    return cause["error"]["_tag"] if cause["_tag"] == "Fail" else cause["_tag"]


def test_b09_six_hundred_reads_in_one_frame_get_overloaded_beyond_the_bound(limited_bridge, sid, tid):
    bridge = limited_bridge(options={"steps": 20, "delay": 0.05})
    ids = [f"r{i}" for i in range(600)]
    with bridge.connect() as c:
        c.open(sid)
        assert c.start(sid, tid, "a b c") == "started"
        payload = {"sessionId": sid, "turnId": tid, "offset": 0, "afterStep": 0}
        c.send([frames.to_json(frames.Request(rid, "ReadTurn", payload, ())) for rid in ids])
        first = _first_answers(c, ids, timeout=30)
        assert len(first) == 600, f"only {len(first)} of 600 reads were answered"
        tags = [_failure_tag(m) for m in first.values()]
        served = sum(1 for m in first.values() if m["_tag"] == "Chunk")
        assert set(tags) <= {None, "Overloaded"}, f"other failures: {set(tags)}"
        assert tags.count("Overloaded") == 600 - served
        assert 1 <= served <= 32, served
        # The accept loop, other connections and new turns are fine.
        with bridge.connect() as other:
            assert other.value("Hello")["agentId"] == "echo"
            other.open(sid + "-2")
            assert other.start(sid + "-2", tid + "-2", "x") == "started"
            parts, _, exit_ = other.read(sid + "-2", tid + "-2")
            assert exit_["_tag"] == "Success" and text_of(parts) == "x" * 20
    started = time.monotonic()
    bridge.signal(signal.SIGTERM)
    assert bridge.wait(15) == 0
    assert time.monotonic() - started < 15
    assert "Traceback" not in bridge.log()


def _honest_session(bridge: BridgeProcess, n: int, deadline: float, errors: List[str]) -> None:
    """What a host does: connect, open, start, read; an Overloaded answer (or a refused
    connection) is tried again after a pause until ``deadline``."""
    sid, tid, prompt = f"s-honest-{n}", f"t-honest-{n}", f"session {n} "
    pause = 0.05
    while time.monotonic() < deadline:
        try:
            c = bridge.connect()
        except (OSError, websocket.WebSocketException):
            time.sleep(pause)
            pause = min(1.0, pause * 2)
            continue
        try:
            c.ws.settimeout(20)
            c.open(sid)
            while True:
                exit_ = c.call("StartTurn", {"sessionId": sid, "turnId": tid, "prompt": prompt})
                if exit_["_tag"] == "Success":
                    break
                assert _failure_tag({"_tag": "Exit", "exit": exit_}) == "Overloaded", exit_
                time.sleep(pause)
                pause = min(1.0, pause * 2)
            while True:
                parts, _, exit_ = c.read(sid, tid)
                if exit_["_tag"] == "Success":
                    break
                assert _failure_tag({"_tag": "Exit", "exit": exit_}) == "Overloaded", exit_
                time.sleep(pause)
                pause = min(1.0, pause * 2)
            if text_of(parts) != prompt * 2:
                errors.append(f"session {n}: text {text_of(parts)!r}")
            return
        except Exception as exc:  # noqa: BLE001 - reported by the test
            errors.append(f"session {n}: {type(exc).__name__}: {exc}")
            return
        finally:
            c.close()
    errors.append(f"session {n}: not done in time")


def test_b09_fifty_honest_sessions_work_in_a_128_task_sandbox(limited_bridge):
    bridge = limited_bridge(options={"steps": 2, "delay": 0.01})
    errors: List[str] = []
    deadline = time.monotonic() + 60
    threads = [
        threading.Thread(target=_honest_session, args=(bridge, n, deadline, errors)) for n in range(50)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(70)
    assert not errors, errors[:5]
    assert bridge.proc.poll() is None, bridge.log()[-3000:]
    with bridge.connect() as c:
        assert c.value("Hello")["agentId"] == "echo"
    assert "Traceback" not in bridge.log()


def test_b09_a_turn_beyond_the_bound_is_overloaded_and_not_written(make_bridge, sid):
    bridge = make_bridge(options={"steps": 50, "delay": 0.05}, args=["--max-turns", "1"])
    with bridge.connect() as c:
        c.open(sid)
        assert c.start(sid, "t-first", "a") == "started"
        causes = c.causes("StartTurn", {"sessionId": sid, "turnId": "t-second", "prompt": "b"})
        assert causes[0]["_tag"] == "Fail" and causes[0]["error"]["_tag"] == "Overloaded"
        assert c.value("CancelTurn", {"sessionId": sid, "turnId": "t-first"})
        parts, _, _ = c.read(sid, "t-first")
        assert parts[-1]["finishReason"] == "cancelled"

        def second() -> Optional[str]:
            exit_ = c.call("StartTurn", {"sessionId": sid, "turnId": "t-second", "prompt": "b"})
            return exit_["value"]["status"] if exit_["_tag"] == "Success" else None

        assert wait_until(second, 10) == "started", "nothing of the refused turn was written"


def test_b09_the_host_resends_a_start_the_bridge_refused_as_overloaded(sandbox):
    opts = options("echo", agent_options={"steps": 3, "delay": 0.05})
    opts = dataclasses.replace(opts, args=[*opts.args, "--max-turns", "1"])
    results: List[str] = []
    errors: List[BaseException] = []

    def run_turn(n: int) -> None:
        try:
            with bc.create_session(opts, session_options(sandbox, resend_window=30.0)) as session:
                turn = session.turn(f"p{n} ")
                for _ in turn:
                    pass
                results.append(turn.text())
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=run_turn, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert sorted(results) == sorted(f"p{n} " * 3 for n in range(3))


# ---------------------------------------------------------------------------- B03: revisions


def test_b03_open_session_refuses_a_revision_near_the_limit(shared_echo, sid):
    with shared_echo.connect() as c:
        for revision in (2**53 - 2, MAX_OPEN_REVISION + 1):
            state = {"sessionId": sid, "revision": revision, "data": {"turns": 0}}
            causes = c.causes("OpenSession", {"sessionId": sid, "state": state})
            assert causes[0]["_tag"] == "Fail", causes
            assert causes[0]["error"]["_tag"] == "RevisionExhausted"
            assert causes[0]["error"]["revision"] == revision
        # At the bound itself the session works, and turns change it.
        state = {"sessionId": sid, "revision": MAX_OPEN_REVISION, "data": {"turns": 0}}
        assert c.open(sid, state)["revision"] == MAX_OPEN_REVISION
        for n in range(2):
            c.start(sid, f"{sid}-t{n}", "x")
            parts, _, exit_ = c.read(sid, f"{sid}-t{n}")
            assert exit_["_tag"] == "Success" and parts[-1]["finishReason"] == "stop"
        states = [p["state"]["revision"] for p in parts if p["type"] == "session-state"]
        assert states == [MAX_OPEN_REVISION + 2]
        # Past the bound it is not opened again (a new connection would get a session that
        # cannot change for long).
        causes = c.causes("OpenSession", {"sessionId": sid, "state": None})
        assert causes[0]["error"]["_tag"] == "RevisionExhausted"


def test_b03_a_stored_session_at_the_limit_is_refused_and_cannot_grow(make_bridge, tmp_path, sid):
    bridge = make_bridge(options={"steps": 1})
    with bridge.connect() as c:
        c.open(sid)
    bridge.stop()
    path = os.path.join(bridge.state, identity.STORE_FILE)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE sessions SET revision = ? WHERE id = ?", (MAX_SAFE_INTEGER, sid))
    bridge.start()
    with bridge.connect() as c:
        causes = c.causes("OpenSession", {"sessionId": sid, "state": None})
        assert causes[0]["error"]["_tag"] == "RevisionExhausted", causes
        # A turn started anyway (the session is known) cannot take its revision past 2**53-1.
        assert c.start(sid, "t-over", "x") == "started"
        parts, _, exit_ = c.read(sid, "t-over")
        assert exit_["_tag"] == "Success"
        assert parts[-1]["finishReason"] == "error" and "RevisionExhausted" in parts[-1]["error"]
        assert all(p.get("state", {}).get("revision", 0) <= MAX_SAFE_INTEGER for p in parts)
        json.dumps(parts)  # every value is plain JSON

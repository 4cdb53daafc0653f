"""Thread hygiene and fork safety of a session (issue 6, item 5): no thread of a session
outlives release() or an idle close, its threads are named daemons, and a child made by
os.fork() never uses the parent's socket (it opens its own and resumes from its offset)."""
from __future__ import annotations

import json
import os
import threading
import time

import pytest

import bridge_client as bc
from host_support import options, session_options, wait_until

pytestmark = [pytest.mark.timeout(60), pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")]


def _ours(threads):
    return {t for t in threads if t.name.startswith("bridge-client-")}


def test_release_leaves_no_thread_of_the_session(sandbox):
    before = set(threading.enumerate())
    session = bc.create_session(options("echo"), session_options(sandbox))
    assert list(session.turn("hello"))[-1].type == "turn-finish"
    during = _ours(set(threading.enumerate()) - before)
    assert {t.name.split("-")[2] for t in during} == {"reader", "idle"}, during
    assert all(t.daemon for t in during), "reader and idle timer are daemons"
    session.release()
    assert set(threading.enumerate()) - before == set(), "release() joined every thread it made"


def test_an_idle_close_leaves_no_thread_of_the_session(sandbox):
    before = set(threading.enumerate())
    with bc.create_session(options("echo"), session_options(sandbox, idle_timeout=0.2)) as session:
        list(session.turn("hello"))
        assert wait_until(lambda: not session.connected, timeout=10)
        assert wait_until(lambda: not _ours(set(threading.enumerate()) - before), timeout=10)
        # The next use opens a connection again.
        assert list(session.turn("again"))[-1].type == "turn-finish"
    assert set(threading.enumerate()) - before == set()


def _in_child(work):
    """Fork; run ``work()`` in the child and return what it returned (JSON) to the parent.
    The child always ends with os._exit; the parent waits for it with a bound."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        code = 0
        try:
            os.close(read_end)
            result = json.dumps({"ok": work()})
        except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
            result = json.dumps({"error": f"{type(exc).__name__}: {exc}"})
            code = 1
        try:
            os.write(write_end, result.encode())
        finally:
            os._exit(code)
    os.close(write_end)
    deadline = time.monotonic() + 40
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the child did not finish")
        time.sleep(0.02)
    with os.fdopen(read_end, "rb") as f:
        answer = json.loads(f.read() or b'{"error": "no answer"}')
    assert "error" not in answer, answer.get("error")
    return answer["ok"]


def test_a_forked_child_opens_its_own_connection_and_leaves_the_parents_alone(sandbox):
    with bc.create_session(options("echo"), session_options(sandbox)) as session:
        list(session.turn("parent first"))
        conn = session._conn
        parent_port = conn._ws.sock.getsockname()[1]

        def child():
            inherited_closed = conn.closed
            connected_at_start = session.connected
            turn = session.turn("child")
            text = "".join(p.text for p in turn if p.type == "text-delta")
            return {
                "inherited_closed": inherited_closed,
                "connected_at_start": connected_at_start,
                "text": text,
                "new_connection": session._conn is not conn,
                "port": session._conn._ws.sock.getsockname()[1],
            }

        got = _in_child(child)
        assert got["inherited_closed"] and not got["connected_at_start"]
        assert got["text"] == "child" and got["new_connection"]
        assert got["port"] != parent_port, "the child used a socket of its own"
        # The parent's connection was not shut down or closed by the child.
        assert session._conn is conn and not conn.closed
        turn = session.turn("parent again")
        assert list(turn)[-1].type == "turn-finish" and turn.text() == "parent again"
        assert session._conn is conn, "the parent never had to reconnect"


def test_a_turn_being_read_when_the_process_forks_is_read_to_its_end_by_both(sandbox):
    opts = options("echo", agent_options={"steps": 6, "chunks": 3, "delay": 0.02})
    with bc.create_session(opts, session_options(sandbox)) as session:
        turn = session.turn("split")
        for _ in range(4):
            next(turn)
        conn = session._conn

        def child():
            rest = [p.type for p in turn]
            own = session._conn is not conn
            return {"last": rest[-1], "text": turn.text(), "steps": turn.steps, "own": own}

        got = _in_child(child)
        assert got == {"last": "turn-finish", "text": "split" * 6, "steps": 6, "own": True}
        rest = list(turn)
        assert rest[-1].type == "turn-finish" and turn.text() == "split" * 6
        assert session._conn is conn and not conn.closed


def test_threads_racing_for_one_session_get_a_whole_turn_or_turn_in_progress(sandbox):
    opts = options("echo", agent_options={"steps": 3, "delay": 0.01})
    with bc.create_session(opts, session_options(sandbox)) as session:
        list(session.turn("warm up"))  # connected: the race is about turns, not the launch
        start = threading.Barrier(4, timeout=10)
        outcomes = {}

        def race(n):
            start.wait()
            try:
                turn = session.turn(f"thread {n} ")
                parts = list(turn)
                outcomes[n] = ("whole", parts[-1].type, turn.text())
            except bc.TurnInProgress as exc:
                outcomes[n] = ("refused", str(exc))
            except Exception as exc:  # noqa: BLE001 - any other outcome is the failure shown
                outcomes[n] = ("other", repr(exc))

        threads = [threading.Thread(target=race, args=(n,), name=f"test-race-{n}") for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert not any(t.is_alive() for t in threads)
        kinds = sorted(o[0] for o in outcomes.values())
        assert "other" not in kinds, outcomes
        assert kinds.count("whole") >= 1, outcomes
        for n, outcome in outcomes.items():
            if outcome[0] == "whole":
                assert outcome[1:] == ("turn-finish", f"thread {n} " * 3)
            else:
                assert "another thread" in outcome[1] or "belongs to another thread" in outcome[1]
        assert list(session.turn("after the race"))[-1].type == "turn-finish"


def test_c06_a_child_forked_while_the_idle_watcher_runs_closes_its_own_idle_connections(sandbox):
    from bridge_client.client import idle_watch

    with bc.create_session(options("echo"), session_options(sandbox, idle_timeout=0.5)) as session:
        list(session.turn("parent first"))
        assert idle_watch.WATCH._thread is not None and idle_watch.WATCH.watching() == 1

        def child():
            watched_at_start = idle_watch.WATCH.watching()
            turn = session.turn("child")
            list(turn)
            text = turn.text()
            after_turn = session.connected
            closed = wait_until(lambda: not session.connected, timeout=5.0)
            return {"watched_at_start": watched_at_start, "text": text, "after_turn": after_turn,
                    "closed": closed}

        got = _in_child(child)
        assert got == {"watched_at_start": 0, "text": "child", "after_turn": True, "closed": True}
        # The parent's watcher goes on: its connection closes at its own idle timeout.
        assert wait_until(lambda: not session.connected, timeout=5.0)
        turn = session.turn("parent again")
        list(turn)
        assert turn.text() == "parent again"

"""Sessions used from several threads, and edges found by trying to break them."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

import bridge_client as bc
from host_support import options, session_options, wait_until

pytestmark = pytest.mark.timeout(60)


def test_a_prompt_that_is_not_unicode_is_refused_and_the_session_goes_on(sandbox):
    with bc.create_session(options("echo"), session_options(sandbox)) as session:
        list(session.turn("first"))
        with pytest.raises(bc.BadRequest, match="surrogate"):
            session.turn("x\ud800")
        assert session._active_turn is None
        assert session._conn._pending == {}, "nothing was left waiting for an answer"
        assert [p.type for p in session.turn("after")][-1] == "turn-finish"


def test_c11_suspend_from_another_thread_stops_the_reader_and_keeps_the_connection(sandbox):
    opts = options("echo", agent_options={"steps": 50, "delay": 0.02})
    with bc.create_session(opts, session_options(sandbox)) as session:
        turn = session.turn("slow")
        conn = session._conn
        seen = []
        reader = threading.Thread(target=lambda: seen.extend(turn), name="test-reader")
        reader.start()
        assert wait_until(lambda: len(seen) > 3)
        state = session.suspend_turn()
        reader.join(timeout=10)
        assert not reader.is_alive(), "the reader stopped"
        assert state == turn.state and not turn.done
        assert session._conn is conn and not conn.closed, "the connection was not dropped"
        # The turn went on in the bridge: continuing reads it to its end.
        rest = list(session.continue_turn(state, steps=turn.steps))
        assert rest[-1].type == "turn-finish"


def test_c16_release_from_another_thread_closes_the_session_in_the_bridge(sandbox):
    opts = options("echo", agent_options={"steps": 50, "delay": 0.02})
    session = bc.create_session(opts, session_options(sandbox))
    turn = session.turn("slow")
    errors = []

    def read():
        try:
            for _ in turn:
                pass
        except bc.SessionReleased as exc:
            errors.append(exc)

    reader = threading.Thread(target=read, name="test-reader")
    reader.start()
    time.sleep(0.1)
    state = session.release()
    reader.join(timeout=10)
    assert not reader.is_alive()
    assert len(errors) == 1, "the reader learns that the session was released"
    assert state is not None and state.session_id == session.id
    # CloseSession reached the bridge: the bridge's copy is closed (a new turn needs OpenSession).
    with bc.create_session(opts, session_options(sandbox, resume=state)) as again:
        assert [p.type for p in again.turn("next")][-1] == "turn-finish"


def test_turn_from_another_thread_while_one_is_unfinished_is_turn_in_progress(sandbox):
    opts = options("echo", agent_options={"steps": 5, "delay": 0.02})
    with bc.create_session(opts, session_options(sandbox)) as session:
        turn = session.turn("mine")
        next(turn)
        caught = []

        def intrude():
            try:
                session.turn("theirs")
            except bc.TurnInProgress as exc:
                caught.append(exc)

        other = threading.Thread(target=intrude)
        other.start()
        other.join(timeout=10)
        assert len(caught) == 1 and "suspend_turn" in str(caught[0])
        assert list(turn)[-1].type == "turn-finish", "the owner's turn was not disturbed"
        # Once it is finished, any thread may start the next turn.
        done = []
        other = threading.Thread(target=lambda: done.append(list(session.turn("theirs"))[-1].type))
        other.start()
        other.join(timeout=10)
        assert done == ["turn-finish"]


def test_c15_a_frozen_bridge_gives_bridge_unavailable_with_the_state(sandbox):
    opts = options("echo", agent_options={"steps": 20, "delay": 0.05})
    quick = session_options(
        sandbox, ping_interval=0.3, ping_timeout=0.3, resend_window=2.0, launch_timeout=2.0, open_timeout=1.0
    )
    session = bc.create_session(opts, quick)
    turn = session.turn("x")
    next(turn)
    pid = session._hello.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        with pytest.raises(bc.BridgeUnavailable) as caught:
            for _ in turn:
                pass
        assert caught.value.state is not None and caught.value.state == session.state
        assert session.released
    finally:
        os.kill(pid, signal.SIGCONT)
        os.kill(pid, signal.SIGKILL)


def test_local_sandbox_accepts_a_folder_name_that_is_not_utf8(tmp_path, home):
    name = os.path.join(str(tmp_path), b"bad\xff name".decode("utf-8", "surrogateescape"))
    os.mkdir(name)
    sandbox = bc.LocalSandbox(name)
    assert sandbox.id.startswith("local-")
    assert sandbox.exec(["pwd"]).stdout.strip() == os.fsencode(os.path.realpath(name))

"""What the session does when the bridge goes away or its files are damaged (C04, C08, C13,
C15, B08). The full resilience suite (proxies, chaos) belongs to the resilience issue; these
tests pin the behaviour the walking skeleton already has."""
from __future__ import annotations

import os
import shutil
import signal

import pytest

import bridge_client as bc
from bridge_client.state_dir import identity
from host_support import options, session_options

pytestmark = pytest.mark.timeout(60)


def _listening(sandbox, session):
    return os.path.join(identity.state_dir(sandbox.state_root, session.bridge_id), identity.LISTENING_FILE)


def _undisturbed_text(prompt: str, steps: int) -> str:
    return prompt * steps


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_c13_bridge_gone_mid_turn_the_turn_finishes_in_a_new_bridge(sandbox, sig):
    opts = options("echo", agent_options={"steps": 5, "delay": 0.02})
    with bc.create_session(opts, session_options(sandbox)) as session:
        turn = session.turn("one two three ")
        parts = []
        for part in turn:
            parts.append(part)
            if len(parts) == 12:
                first_pid = session._hello.pid
                os.kill(first_pid, sig)
        assert parts[-1].type == "turn-finish" and parts[-1].finish_reason == "stop"
        assert session._hello.pid != first_pid
        indexes = [p.index for p in parts]
        assert indexes == sorted(set(indexes)), "no part repeated, none out of order"
        assert turn.text() == _undisturbed_text("one two three ", 5)
        finished_steps = [p.step for p in parts if isinstance(p, bc.StepFinish)]
        assert finished_steps == sorted(set(finished_steps)) == list(range(5)), "no complete step repeated"


def test_c04_damaged_listening_file_of_a_live_bridge_is_written_again(sandbox):
    with bc.create_session(options("echo"), session_options(sandbox)) as first:
        list(first.turn("a"))
        pid = first._hello.pid
        path = _listening(sandbox, first)
        identity.secure_write(path, b"{garbage")
        with bc.create_session(options("echo"), session_options(sandbox)) as second:
            assert [p.type for p in second.turn("b")][-1] == "turn-finish"
            assert second._hello.pid == pid, "the live bridge was found again, not replaced"


def test_c15_sandbox_gone_gives_bridge_unavailable_with_the_last_state(sandbox, workspace):
    opts = options("echo", agent_options={"steps": 20, "delay": 0.05})
    session = bc.create_session(opts, session_options(sandbox, resend_window=2.0))
    turn = session.turn("x")
    next(turn)
    last_state = session.state
    shutil.rmtree(workspace)
    os.kill(session._hello.pid, signal.SIGKILL)
    with pytest.raises(bc.BridgeUnavailable) as caught:
        for _ in turn:
            pass
    assert caught.value.state == last_state
    assert session.released
    assert session.release() == last_state
    with pytest.raises(bc.SessionReleased):
        session.turn("again")
    os.mkdir(workspace)  # for the fixture's cleanup


def test_b08_a_revision_past_the_safe_range_is_refused_and_the_bridge_stays_up(sandbox):
    with bc.create_session(options("echo"), session_options(sandbox)) as good:
        list(good.turn("a"))
        pid = good._hello.pid
        huge = bc.SessionState("big-revision", 2**63, {})
        with bc.create_session(options("echo"), session_options(sandbox, resume=huge)) as bad:
            with pytest.raises(bc.BadRequest, match="revision"):
                bad.turn("b")
        assert [p.type for p in good.turn("c")][-1] == "turn-finish"
        assert good._hello.pid == pid


def test_a_prompt_over_the_limit_is_refused_before_it_is_sent(sandbox):
    with bc.create_session(options("echo"), session_options(sandbox)) as session:
        with pytest.raises(bc.BadRequest, match="prompt is over"):
            session.turn("x" * (4 * 1024 * 1024 + 1))
        assert not session.connected, "nothing was sent"

"""Other options (C14): a session of other agent options continues a turn in the bridge that
runs it, then runs its next turns in its own bridge; when that bridge is gone, the turn runs
again from its prompt in the session's own bridge."""
from __future__ import annotations

import os
import shutil

import pytest

import bridge_client as bc
from bridge_client.state_dir import identity
from host_support import _alive, options, session_options, wait_until
from resilience_support import bridge_pid, check_turn, sigkill_bridge

pytestmark = pytest.mark.timeout(90)

PROMPT = "carried over "
FIRST = {"steps": 3, "chunks": 2, "delay": 0.05}  # the first host's options
OTHER = {"steps": 2, "chunks": 1}  # another model, say: another bridge (C03)


def _suspended_turn(sandbox, after_steps=1):
    """Start a turn in the first bridge, read ``after_steps`` steps, release that host."""
    first = bc.create_session(options("echo", agent_options=FIRST), session_options(sandbox))
    turn = first.turn(PROMPT)
    for _ in turn:
        if turn.steps == after_steps:
            break
    state = bc.TurnState.from_json(turn.state.to_json())
    first.release()
    return first, state


def test_c14_continue_in_the_turns_bridge_then_run_next_turns_in_the_own(sandbox):
    first, state = _suspended_turn(sandbox)
    first_pid = bridge_pid(sandbox, first.bridge_id)
    with bc.create_session(options("echo", agent_options=OTHER), session_options(sandbox)) as other:
        assert other.bridge_id != first.bridge_id
        turn = other.continue_turn(state, steps=1)
        rest = list(turn)
        assert turn.state.bridge_id == first.bridge_id, "read from the bridge that runs the turn"
        nxt = other.turn("next")
        assert nxt.state.bridge_id == other.bridge_id, "the next turn runs in the session's own bridge"
        nxt_parts = list(nxt)
        own_pid = bridge_pid(sandbox, other.bridge_id)
    check_turn(rest, steps=3, first_step=1)  # the first bridge's options: 3 steps
    assert turn.text() == PROMPT * 2
    check_turn(nxt_parts, steps=2)  # the own bridge's options: 2 steps
    assert own_pid not in (None, first_pid) and _alive(first_pid), "two bridges, the first one untouched"


def test_c14_a_dead_turns_bridge_with_its_state_directory_is_launched_again(sandbox):
    first, state = _suspended_turn(sandbox)
    sigkill_bridge(sandbox, first.bridge_id)  # mid-turn: its store keeps the turn
    with bc.create_session(options("echo", agent_options=OTHER), session_options(sandbox)) as other:
        turn = other.continue_turn(state, steps=1)
        rest = list(turn)
        assert turn.state.bridge_id == first.bridge_id
        assert bridge_pid(sandbox, first.bridge_id) is not None, "the turn's bridge runs again"
    check_turn(rest, steps=3, first_step=1)
    assert turn.text() == PROMPT * 2, "complete steps are not repeated; a cut one is reset"


@pytest.mark.parametrize("steps", [0, 1])
def test_c14_turns_bridge_gone_runs_the_turn_again_from_its_prompt_in_the_own(sandbox, steps):
    first, state = _suspended_turn(sandbox)
    sigkill_bridge(sandbox, first.bridge_id)
    shutil.rmtree(identity.state_dir(sandbox.state_root, first.bridge_id))
    with bc.create_session(options("echo", agent_options=OTHER), session_options(sandbox)) as other:
        turn = other.continue_turn(state, steps=steps)
        parts = list(turn)
        assert isinstance(parts[0], bc.TurnStart)
        assert parts[0].turn.bridge_id == other.bridge_id, "a new turn-start names the session's own bridge"
        assert parts[0].turn.turn_id == state.turn_id and parts[0].turn.prompt == PROMPT
        assert turn.state.bridge_id == other.bridge_id
        assert other.state.session_id == other.id
    check_turn(parts, steps=2)  # run again from its prompt, every step, under the own options
    assert turn.text() == PROMPT * 2 and turn.steps == 2
    assert not os.path.exists(identity.state_dir(sandbox.state_root, first.bridge_id)), "not relaunched"


def test_c14_turns_bridge_gone_in_the_middle_of_the_read(sandbox):
    first, state = _suspended_turn(sandbox)
    with bc.create_session(options("echo", agent_options=OTHER), session_options(sandbox)) as other:
        turn = other.continue_turn(state, steps=1)
        parts = []
        for part in turn:
            parts.append(part)
            if len(parts) == 2:
                sigkill_bridge(sandbox, first.bridge_id)
                shutil.rmtree(identity.state_dir(sandbox.state_root, first.bridge_id))
    starts = [i for i, p in enumerate(parts) if isinstance(p, bc.TurnStart)]
    assert len(starts) == 2, "the run in the own bridge begins with its own turn-start"
    again = parts[starts[1]:]
    assert again[0].turn.bridge_id == other.bridge_id
    check_turn(again, steps=2)
    assert turn.text() == PROMPT * 2, "the text of the first run was dropped with it"


def test_c14_a_state_naming_no_bridge_id_is_refused(sandbox):
    _, state = _suspended_turn(sandbox)
    bad = bc.TurnState.from_dict({**state.to_dict(), "bridgeId": "../../etc"})
    with bc.create_session(options("echo", agent_options=OTHER), session_options(sandbox)) as other:
        with pytest.raises(bc.BridgeMismatch, match="not a bridge id"):
            other.continue_turn(bad)


def test_c14_c07_a_resumed_session_takes_the_state_the_turns_bridge_gave_into_its_own(sandbox):
    first = bc.create_session(options("echo", agent_options=FIRST), session_options(sandbox))
    turn = first.turn(PROMPT)
    next(turn)
    state, session_state = turn.state, first.state
    first.release()
    resumed = session_options(sandbox, resume=session_state)
    with bc.create_session(options("echo", agent_options=OTHER), resumed) as other:
        assert other.id == first.id
        list(other.continue_turn(state))
        assert other.state.data == {"turns": 1}, "the state the turn's bridge gave is this session's now"
        list(other.turn("in my own bridge"))
        assert other.state.data == {"turns": 2}, "the own bridge opened the session from that state"


def test_c06_c14_the_turns_bridge_connection_closes_when_unused(sandbox):
    first, state = _suspended_turn(sandbox)
    so = session_options(sandbox, idle_timeout=0.3)
    with bc.create_session(options("echo", agent_options=OTHER), so) as other:
        turn = other.continue_turn(state, steps=1)
        link = turn._link
        next(turn)  # then the caller pauses: the connection to the turn's bridge goes unused
        assert link._conn is not None
        assert wait_until(lambda: link._conn is None, timeout=10), "closed after idle_timeout"
        rest = list(turn)  # reading again opens a new one and goes on
    assert rest[-1].type == "turn-finish" and turn.text() == PROMPT * 2

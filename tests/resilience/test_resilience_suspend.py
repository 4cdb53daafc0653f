"""Suspend and continue (C10, C11, C12): from the same session, from another session, from
another Python process that has only the turn-start JSON; ``steps=k`` skips exactly k steps;
a ``break`` or a KeyboardInterrupt suspends and never cancels."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

import bridge_client as bc
from host_support import options, session_options
from resilience_support import check_turn

pytestmark = pytest.mark.timeout(90)

STEPS = 4
ECHO = {"steps": STEPS, "chunks": 3, "delay": 0.02}
PROMPT = "to be continued "

_OTHER_PROCESS = textwrap.dedent(
    """
    import json, sys
    import bridge_client as bc
    from bridge_client.wire.parts import part_from_dict

    workspace, turn_start_json, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    state = part_from_dict(json.loads(turn_start_json)).turn   # all this process knows
    opts = bc.bridge_options("echo", agent_options=json.loads(sys.argv[4]), bridge_idle_timeout=60)
    so = bc.CreateSessionOptions(workspace=bc.Workspace(bc.LocalSandbox(workspace)), launch_timeout=30)
    with bc.create_session(opts, so) as session:
        turn = session.continue_turn(state, steps=steps)
        for part in turn:
            print(json.dumps(part.to_dict()), flush=True)
        print(json.dumps({"text": turn.text(), "steps": turn.steps}), flush=True)
    """
)


def _parts_from(lines):
    from bridge_client.wire.parts import part_from_dict

    values = [json.loads(line) for line in lines if line.strip()]
    return [part_from_dict(v) for v in values[:-1]], values[-1]


@pytest.mark.parametrize("suspend_after", [0, 2])
def test_c10_c12_continue_from_another_process_with_only_the_turn_start_json(
    sandbox, workspace, suspend_after
):
    with bc.create_session(options("echo", agent_options=ECHO), session_options(sandbox)) as session:
        turn = session.turn(PROMPT)
        turn_start = next(turn)
        assert isinstance(turn_start, bc.TurnStart)
        for _ in turn:
            if turn.steps == suspend_after:
                break
        state = session.suspend_turn()
        assert state == turn_start.turn, "suspend returns what turn-start carries (C10)"
        turn_start_json = json.dumps(turn_start.to_dict())
    # This host is gone (session released); another process continues from the JSON alone.
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _OTHER_PROCESS,
            workspace,
            turn_start_json,
            str(suspend_after),
            json.dumps(ECHO),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    parts, summary = _parts_from(done.stdout.splitlines())
    check_turn(parts, steps=STEPS, first_step=suspend_after)
    assert all(p.step is None or p.step >= suspend_after for p in parts), "exactly the first k steps skipped"
    assert summary == {"text": PROMPT * (STEPS - suspend_after), "steps": STEPS}


@pytest.mark.parametrize("k", [0, 1, 3, 4])
def test_c12_continue_with_steps_k_skips_exactly_k_steps(sandbox, k):
    with bc.create_session(options("echo", agent_options=ECHO), session_options(sandbox)) as session:
        turn = session.turn(PROMPT)
        state = turn.state
        assert session.suspend_turn() == state  # the turn keeps running in the bridge (C11)
        rest = list(session.continue_turn(state, steps=k))
    check_turn(rest, steps=STEPS, first_step=k)
    assert sorted({p.step for p in rest if p.step is not None}) == list(range(k, STEPS))


def test_c11_keyboard_interrupt_in_the_loop_suspends_and_reading_goes_on(sandbox):
    with bc.create_session(options("echo", agent_options=ECHO), session_options(sandbox)) as session:
        turn = session.turn(PROMPT)
        seen = []
        with pytest.raises(KeyboardInterrupt):
            for part in turn:
                seen.append(part)
                if isinstance(part, bc.StepFinish):
                    raise KeyboardInterrupt
        assert not turn.done and session.released is False
        # The session is usable: another turn runs, the first one kept running (C11).
        assert list(session.turn("meanwhile"))[-1].type == "turn-finish"
        rest = list(session.continue_turn(turn.state, steps=turn.steps))
    assert rest[-1].type == "turn-finish" and rest[-1].finish_reason == "stop"
    check_turn(seen + rest[1:], steps=STEPS)


def test_c11_iterating_again_after_a_break_reads_on_without_repeats(sandbox):
    with bc.create_session(options("echo", agent_options=ECHO), session_options(sandbox)) as session:
        turn = session.turn(PROMPT)
        seen = []
        for part in turn:
            seen.append(part)
            if len(seen) == 5:
                break
        seen.extend(turn)
    check_turn(seen, steps=STEPS)
    assert [p.index for p in seen] == list(range(len(seen)))
    assert turn.text() == PROMPT * STEPS


def test_c12_continue_a_suspended_turn_from_another_session_in_the_same_process(sandbox):
    opts = options("echo", agent_options=ECHO)
    with (
        bc.create_session(opts, session_options(sandbox)) as first,
        bc.create_session(opts, session_options(sandbox)) as second,
    ):
        turn = first.turn(PROMPT)
        for _ in turn:
            if turn.steps == 1:
                break
        state = turn.suspend()
        rest = list(second.continue_turn(state, steps=1))
        assert second.state.session_id == second.id, (
            "a continued turn of another session leaves this one's state"
        )
        assert first.turn("first still works").state.session_id == first.id
    check_turn(rest, steps=STEPS, first_step=1)


def test_c11_suspend_then_iterating_the_same_turn_again_loses_nothing(sandbox):
    # No delay: the whole turn arrives in a Chunk or two, so at the suspend most of it was
    # received but not yet yielded, turn-finish included.
    opts = options("echo", agent_options={"steps": 3, "chunks": 4})
    with bc.create_session(opts, session_options(sandbox)) as session:
        turn = session.turn(PROMPT)
        seen = [next(turn) for _ in range(4)]
        state = turn.suspend()
        assert state == turn.state
        seen.extend(turn)
    check_turn(seen, steps=3)
    assert [p.index for p in seen] == list(range(len(seen)))
    assert turn.text() == PROMPT * 3

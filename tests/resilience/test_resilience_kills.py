"""Bridge death (C13, B05): SIGKILL of the bridge at a chosen part index, mid-step and between
steps, and a bridge that keeps dying (the crash-loop bound)."""
from __future__ import annotations

import pytest

import bridge_client as bc
from host_support import options, session_options
from resilience_support import bridge_pid, check_turn, read_killing_at, sigkill_bridge

pytestmark = pytest.mark.timeout(90)

PROMPT = "one two three four five six seven eight "
STEPS = 2
# Each part waits 0.08 s in the bridge, so the bridge is a few parts ahead of the reader at
# most; a step is 13 parts: step-start, tool-call, tool-result, 8 text deltas, step-finish.
ECHO = {"steps": STEPS, "chunks": 8, "delay": 0.08}


def _kill_at(session, sandbox, turn, index):
    killed = []

    def kill():
        killed.append(sigkill_bridge(sandbox, session.bridge_id))

    parts = read_killing_at(turn, kill, lambda part, _: part.index == index)
    return parts, killed[0]


@pytest.fixture(scope="module")
def undisturbed_text(tmp_path_factory):
    """The text of an undisturbed run of the same turn (its own bridge, killed afterwards)."""
    import os

    from host_support import SECRET, kill_all_under

    folder = tmp_path_factory.mktemp("undisturbed")
    old = {k: os.environ.get(k) for k in ("BRIDGE_CLIENT_HOME", "BRIDGE_CLIENT_SECRET")}
    os.environ["BRIDGE_CLIENT_HOME"] = str(folder / "home")
    os.environ["BRIDGE_CLIENT_SECRET"] = SECRET
    try:
        (folder / "ws").mkdir()
        sandbox = bc.LocalSandbox(str(folder / "ws"))
        opts = options("echo", agent_options={**ECHO, "delay": 0})
        with bc.create_session(opts, session_options(sandbox)) as session:
            turn = session.turn(PROMPT)
            parts = list(turn)
        assert not any(isinstance(p, bc.StepReset) for p in parts)
        return turn.text()
    finally:
        kill_all_under(str(folder / "ws"))
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.mark.parametrize(
    "index, step",
    [(1, 0), (2, 0), (6, 0), (15, 1), (18, 1)],
    ids=["at-step-start", "at-tool-call", "mid-text", "at-tool-result-of-step-1", "mid-text-of-step-1"],
)
def test_c13_b05_sigkill_mid_step_repeats_only_that_step(sandbox, undisturbed_text, index, step):
    with bc.create_session(options("echo", agent_options=ECHO), session_options(sandbox)) as session:
        turn = session.turn(PROMPT)
        parts, old_pid = _kill_at(session, sandbox, turn, index)
        assert bridge_pid(sandbox, session.bridge_id) not in (None, old_pid), "a new bridge serves the turn"
    final = check_turn(parts, steps=STEPS)
    resets = [p for p in parts if isinstance(p, bc.StepReset)]
    assert [(r.step, r.discarded_attempt) for r in resets] == [(step, 1)], "the cut step is announced once"
    assert final[step] == 2, "the repeated step comes with a higher attempt"
    assert all(final[s] == 1 for s in range(step)), "complete steps are not repeated"
    after = parts[parts.index(resets[0]) + 1:]
    assert next(p for p in after if isinstance(p, bc.StepStart)).attempt == 2
    if index >= 2 and step == 0:
        assert list(resets[0].tool_call_ids) == ["echo-0"], "the reset names the abandoned tool calls"
    assert turn.text() == undisturbed_text


@pytest.mark.parametrize("after_step", [0, 1])
def test_c13_b05_sigkill_between_steps_repeats_no_complete_step(sandbox, undisturbed_text, after_step):
    opts = options("echo", agent_options={**ECHO, "steps": 3})
    with bc.create_session(opts, session_options(sandbox)) as session:
        turn = session.turn(PROMPT)
        killed = []

        def kill():
            killed.append(sigkill_bridge(sandbox, session.bridge_id))

        def at(p, _):
            return isinstance(p, bc.StepFinish) and p.step == after_step

        parts = read_killing_at(turn, kill, at)
    final = check_turn(parts, steps=3)
    # A step that had completed is never reset; one that had only just started may be.
    resets = [p for p in parts if isinstance(p, bc.StepReset)]
    assert all(r.step > after_step for r in resets)
    assert all(final[s] == 1 for s in range(after_step + 1))
    assert turn.text() == undisturbed_text + PROMPT


def test_c13_two_kills_in_one_turn(sandbox, undisturbed_text):
    with bc.create_session(options("echo", agent_options=ECHO), session_options(sandbox)) as session:
        turn = session.turn(PROMPT)
        parts = []
        for part in turn:
            parts.append(part)
            if part.index in (5, 17) and not isinstance(part, bc.StepReset):
                sigkill_bridge(sandbox, session.bridge_id)
    check_turn(parts, steps=STEPS)
    assert len([p for p in parts if isinstance(p, bc.StepReset)]) >= 1
    assert turn.text() == undisturbed_text


def test_c15_a_bridge_that_keeps_dying_mid_step_ends_in_bridge_unavailable(sandbox):
    # Every restart writes new parts (step-reset, the step's next start), so the read makes
    # "progress" for ever; the crash-loop bound ends it once the bridge has restarted for
    # longer than the resend window while no step completed.
    opts = options("echo", agent_options={"steps": 1, "chunks": 4, "delay": 0.2})
    session = bc.create_session(opts, session_options(sandbox, resend_window=2.0))
    turn = session.turn("doomed")
    last_state = session.state
    starts = []
    with pytest.raises(bc.BridgeUnavailable) as caught:
        for part in turn:
            if isinstance(part, bc.StepStart):
                starts.append(part.attempt)
                sigkill_bridge(sandbox, session.bridge_id)
    assert len(starts) >= 2 and starts == sorted(starts), starts
    assert "restarted again and again" in str(caught.value)
    assert caught.value.state == last_state
    assert session.released and session.release() == last_state


def test_c13_b05_shell_driver_continues_after_sigkill_and_runs_no_complete_command_again(sandbox, workspace):
    import os

    prompt = "echo one >> log.txt\nsleep 1; echo two >> log.txt; echo two\necho three >> log.txt"
    with bc.create_session(options("shell"), session_options(sandbox)) as session:
        turn = session.turn(prompt)

        def kill():
            sigkill_bridge(sandbox, session.bridge_id)

        def at(p, _):
            return isinstance(p, bc.ToolCall) and "sleep" in str(p.input)

        parts = read_killing_at(turn, kill, at)
    final = check_turn(parts, steps=3)
    assert final[0] == 1 and final[1] == 2 and final[2] == 1
    assert [(r.step, r.discarded_attempt) for r in parts if isinstance(r, bc.StepReset)] == [(1, 1)]
    assert turn.text() == "two\n"
    with open(os.path.join(workspace, "log.txt")) as f:
        lines = f.read().split()
    assert lines.count("one") == 1 and lines.count("three") == 1, "complete steps' commands ran once"

"""Warm CLIs: the real Claude Code (``claude -p --input-format stream-json``), Qwen Code and
pi (``pi --mode rpc``) keep running between the turns of a session and take each next prompt
on stdin, offline against the scripted model server. One process serves every turn and the
conversation goes on in it; one left unused ``agent_idle_timeout`` seconds is stopped, and the
next turn resumes the CLI session cold; a SIGKILLed bridge leaves no warm CLI behind; a
cancelled turn keeps none; host tools reach each turn once."""
from __future__ import annotations

import os
import signal

import pytest

from host_support import bridge_killing_lookup, wait_until
from model_server import hang, shell_call, text, text_quoting_last_tool_output, tool_call
from test_real_agents import _check_clean, _cli_processes, _session

pytestmark = pytest.mark.timeout(150)


def _turn(session, prompt):
    turn = session.turn(prompt)
    parts = list(turn)
    assert parts[-1].finish_reason == "stop", parts[-1]
    return turn


PROGRAM = {"claude-code": "claude", "qwen": "qwen", "pi": "pi"}


def _one_cli(workspace, program="claude"):
    """The warm CLI's processes (Qwen Code runs as a node process that starts two more):
    a non-empty sorted list, the same while one CLI process serves the session."""
    assert wait_until(lambda: bool(_cli_processes(workspace, program)), timeout=10)
    return sorted(_cli_processes(workspace, program))


@pytest.mark.parametrize("driver", ["claude-code", "qwen", "pi"])
def test_b09_one_cli_process_serves_every_turn_of_a_session(driver, real_cli, model, sandbox, workspace):
    cli, program = real_cli(driver), PROGRAM[driver]
    model.script(
        shell_call("echo hi > f.txt && echo wrote-it"),
        text_quoting_last_tool_output("Saw: "),
        text("Second answer"),
        text("Third answer"),
    )
    with _session(sandbox, cli) as session:
        assert "wrote-it" in _turn(session, "Write f.txt").text()
        pid = _one_cli(workspace, program)
        state = session.state.data
        assert _turn(session, "And now?").text() == "Second answer"
        assert _one_cli(workspace, program) == pid, "the warm CLI took the second prompt"
        assert _turn(session, "And then?").text() == "Third answer"
        assert _one_cli(workspace, program) == pid
        assert session.state.data == state, "the same CLI session goes on"
    assert wait_until(lambda: not _cli_processes(workspace, program), timeout=10), "ended at release"
    later = model.agent_requests()[-1].text()
    assert "echo hi > f.txt" in later and "And now?" in later and "And then?" in later
    _check_clean(model)


def test_b09_a_claude_process_unused_for_its_idle_timeout_ends_and_the_next_turn_resumes(
    real_cli, model, sandbox, workspace
):
    cli = real_cli("claude-code", agent_idle_timeout=0.5)
    model.script(text("First answer"), text("Second answer"))
    with _session(sandbox, cli) as session:
        _turn(session, "Remember the word tangerine")
        first = _one_cli(workspace)
        assert wait_until(lambda: not _cli_processes(workspace, "claude"), timeout=10), "stopped when idle"
        assert _turn(session, "Which word?").text() == "Second answer"
        assert _one_cli(workspace) != first, "a new CLI process"
    assert "tangerine" in model.agent_requests()[-1].text(), "the cold CLI resumed the conversation"
    _check_clean(model)


def test_b09_a_sigkilled_bridge_leaves_no_warm_claude_behind(real_cli, model, sandbox, workspace):
    cli = real_cli("claude-code")
    model.script(text("First answer"), text("Second answer"))
    with _session(sandbox, cli) as session:
        _turn(session, "Remember the word tangerine")
        _one_cli(workspace)
        os.kill(session._hello.pid, signal.SIGKILL)
        assert wait_until(lambda: not _cli_processes(workspace, "claude"), timeout=10), (
            "the keeper ended the dead bridge's warm CLI"
        )
        assert _turn(session, "Which word?").text() == "Second answer"
    assert "tangerine" in model.agent_requests()[-1].text()
    _check_clean(model)


def test_b09_a_cancelled_turn_keeps_no_warm_claude(real_cli, model, sandbox, workspace):
    cli = real_cli("claude-code")
    model.script(hang(text("Working on it", chunks=1)), text("After the cancel"))
    with _session(sandbox, cli) as session:
        turn = session.turn("A long task")
        for part in turn:
            if part.type == "text-delta" and "Working on it" in part.text:
                turn.cancel()
        assert turn.finish.finish_reason == "cancelled"
        assert wait_until(lambda: not _cli_processes(workspace, "claude"), timeout=10), "the CLI ended"
        assert _turn(session, "Go on").text() == "After the cancel"


@pytest.mark.parametrize("driver", ["claude-code", "qwen"])
def test_b09_c22_a_warm_cli_calls_the_host_tools_of_each_turn_once(
    driver, real_cli, model, sandbox, workspace
):
    """The host tools' server lives with the warm process; each turn's calls reach that
    turn, once."""
    import bridge_client as bc

    cli, program = real_cli(driver), PROGRAM[driver]
    calls = []

    def lookup(key: str) -> dict:
        """Look a key up.

        Args:
            key: the key.
        """
        calls.append(key)
        return {"key": key, "value": len(calls)}

    model.script(
        tool_call("mcp__host__lookup", {"key": "alpha"}), text_quoting_last_tool_output("Got: "),
        tool_call("mcp__host__lookup", {"key": "beta"}), text_quoting_last_tool_output("Got: "),
    )
    with _session(sandbox, cli, tools=[lookup]) as session:
        first = session.turn("Look alpha up")
        parts = {"alpha": list(first)}
        pids = _one_cli(workspace, program)
        second = session.turn("Look beta up")
        parts["beta"] = list(second)
        assert _one_cli(workspace, program) == pids, "the warm CLI served the second turn"
    assert calls == ["alpha", "beta"], "each call once, in its own turn"
    for turn, key, value in ((first, "alpha", 1), (second, "beta", 2)):
        assert turn.finish.finish_reason == "stop", turn.finish
        (result,) = [p for p in parts[key] if isinstance(p, bc.HostToolResult)]
        assert result.output["value"] == value, result
    _check_clean(model)


def test_b09_c22_a_bridge_sigkill_mid_host_call_on_a_warm_claude_runs_the_function_once(
    real_cli, model, sandbox, workspace
):
    """The worst moment on the warm path: the bridge dies while the host function of a warm
    CLI's turn runs. The keeper ends the warm CLI, the next bridge resumes the turn cold, the
    CLI calls the tool again and gets the recorded result."""
    import bridge_client as bc

    cli = real_cli("claude-code")
    lookup, calls, holder = bridge_killing_lookup()

    model.script(
        text("Ready."),
        tool_call("mcp__host__lookup", {"key": "alpha"}),
        tool_call("mcp__host__lookup", {"key": "alpha"}),  # the resumed CLI calls it again
        text_quoting_last_tool_output("Got: "),
    )
    with _session(sandbox, cli, tools=[lookup]) as session:
        holder["session"] = session
        _turn(session, "Get ready")
        warm = _one_cli(workspace)
        first = session._hello.pid
        turn = session.turn("Look alpha up")
        parts = list(turn)
        assert session._hello.pid != first, "the bridge was launched again"
        assert _one_cli(workspace) != warm, "the dead bridge's warm CLI was replaced"
    assert turn.finish.finish_reason == "stop", turn.finish
    assert calls == ["alpha"], "the function ran once across the bridge's death"
    results = [p for p in parts if isinstance(p, bc.HostToolResult)]
    assert [r.output for r in results] == [{"key": "alpha", "value": 7}], "one recorded result"
    assert "Got: " in turn.text()

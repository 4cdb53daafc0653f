"""A tool call of a real agent CLI that runs its own tools (Claude Code, Codex, Qwen Code,
Gemini CLI, pi; against the scripted model server) runs once across a bridge SIGKILL: killed
while the tool runs, or after its result and before the step's end, the continued turn does
not run the tool's command twice.

The scripted model answers as a model would: asked with the tool's result in its history (or
the driver's word that it ran), it ends with a text; asked without it, it calls the tool
(again). The tool appends a line to a file, so the file tells how often it ran. The sessions
run without approvals (the CLIs' own checks are bypassed), so no second run can have been
approved: the file must hold one line.

Killed while the tool runs, the keeper kills the CLI *and* its tool (Claude Code and the
Gemini CLI run it in a session of its own, which outlived the bridge before), and the
continued turn names the interrupted call in a ``<agent>-tool-interrupted`` part. Killed after
its result, the continued turn gives the completed call back (its parts once more, the same
call id) and the agent goes on from its result."""
from __future__ import annotations

import os
import sys

import pytest

import bridge_client as bc
from host_support import options, session_options, wait_until

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "env"))
from env_support import bridge_pid, sigkill_bridge  # noqa: E402
from model_server import Reply, Text, shell_call  # noqa: E402

pytestmark = pytest.mark.timeout(180)

DRIVERS = ["claude-code", "codex", "qwen", "gemini", "pi"]
MARK = "appended-42"  # what the command prints (printf): not in the command's text


def _like_a_model(command, hold=None):
    """A reply that calls the shell tool with ``command`` unless the request holds its
    result (then it says it is done); ``hold``: held before its first block."""
    call = shell_call(command)

    def build(request):
        if MARK in request.text():  # a tool result, or the driver's word that it ran
            return [Text("the line is there", 1)]
        return call.blocks(request)

    return Reply(build, hold=hold)


def _lines(workspace):
    path = os.path.join(str(workspace), "out.txt")
    return open(path).read().splitlines() if os.path.exists(path) else []


def _turn(cli, sandbox, workspace, model, kill_when):
    """Run a turn; SIGKILL the bridge (by pid) once ``kill_when(part)``; return the parts and
    the file's lines once a first run the death did not stop would have appended its own."""
    opts = options(cli.driver, agent_options=cli.agent_options)
    how = session_options(sandbox, launch_timeout=60.0, resend_window=30.0)
    with bc.create_session(opts, how) as session:
        turn = session.turn("Append the line to out.txt, please.")
        parts = []
        killed = None
        for part in turn:
            parts.append(part)
            if killed is None and kill_when(part):
                killed = sigkill_bridge(sandbox, session.bridge_id)
                model.release()  # the held answer of the killed run
        assert killed is not None, [(p.type, getattr(p, "tool_name", None)) for p in parts]
        relaunched = bridge_pid(sandbox, session.bridge_id)
        assert relaunched not in (None, killed), "the turn went on in a new bridge"
        wait_until(lambda: len(_lines(workspace)) >= 2, timeout=3)  # a survivor's line (sleep 1)
    return parts, _lines(workspace)


@pytest.mark.parametrize("driver", DRIVERS)
def test_c24_agent_tool_result_before_the_steps_end_is_not_run_again(
    driver, real_cli, model, sandbox, workspace
):
    cli = real_cli(driver)
    command = "sleep 1; echo x >> out.txt; printf 'appended-%s\\n' 42"
    # The answer to the tool's result is held: the bridge dies before the step ends.
    model.script(_like_a_model(command), _like_a_model(command, hold=0), *[_like_a_model(command)] * 4)
    parts, lines = _turn(cli, sandbox, workspace, model, lambda p: p.type == "tool-result")
    assert parts[-1].finish_reason == "stop", parts[-1]
    assert lines == ["x"], f"the tool ran {len(lines)} times"
    calls = [p.tool_call_id for p in parts if p.type == "tool-call"]
    results = [p.tool_call_id for p in parts if p.type == "tool-result"]
    assert len(set(calls)) == 1 and calls[-1:] == results[-1:], "the one call, given back"
    after = parts[next(i for i, p in enumerate(parts) if p.type == "tool-result") + 1]
    if not isinstance(after, bc.StepFinish):  # codex ends its step with its tool's result
        assert any(isinstance(p, bc.StepReset) for p in parts), "\n".join(repr(p) for p in parts)


@pytest.mark.parametrize("driver", DRIVERS)
def test_c24_agent_tool_running_when_the_bridge_dies_is_not_run_twice(
    driver, real_cli, model, sandbox, workspace
):
    cli = real_cli(driver)
    started = os.path.join(str(workspace), "started")
    command = "touch started; sleep 1; echo x >> out.txt; printf 'appended-%s\\n' 42"
    model.script(*[_like_a_model(command)] * 6)
    parts, lines = _turn(
        cli, sandbox, workspace, model,
        lambda p: p.type == "tool-call" and wait_until(lambda: os.path.exists(started), timeout=20),
    )
    assert parts[-1].finish_reason == "stop", parts[-1]
    assert lines == ["x"], f"the tool ran {len(lines)} times: the first run outlived its bridge"
    interrupted = [p.data for p in parts if p.type == "data" and p.name == f"{driver}-tool-interrupted"]
    assert len(interrupted) == 1, "the user is told that the running tool call was cut"

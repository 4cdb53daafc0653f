"""A tool call of a real ACP agent (claude-code-acp, against the scripted model server) runs
once across a bridge SIGKILL: killed while the tool runs, or after its result and before the
step's end, the continued turn does not run the tool again without a new approval.

The scripted model answers as a model would: asked with the tool's result in its history it
ends with a text; asked without it, it calls the tool (again). The tool appends a line to a
file, so the file tells how often it ran. After its result the continued turn gives the
completed call back (one line, one approval); cut while it runs, the call is named in an
``acp-tool-interrupted`` part and a second run needs a second approval."""
from __future__ import annotations

import os
import sys

import pytest

import bridge_client as bc
from env_support import bridge_pid, sigkill_bridge
from host_support import session_options, wait_until
from npm_support import acp_agents_prefix, program

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "agents"))
from model_server import ModelServer, Reply, Text, shell_call  # noqa: E402

pytestmark = pytest.mark.timeout(180)

KEY = "sk-acp-once-test"
MARK = "appended-42"  # the output of `echo appended-$((40+2))`: not in the command's text


@pytest.fixture(scope="module")
def agent_program():
    return program(acp_agents_prefix(), "claude-code-acp")


@pytest.fixture
def model():
    with ModelServer() as server:
        yield server


def _env(server, home):
    return {
        "ANTHROPIC_BASE_URL": server.url,
        "ANTHROPIC_API_KEY": bc.Redacted(KEY),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "IS_SANDBOX": "1",
        "HOME": home,
        "CLAUDE_CONFIG_DIR": os.path.join(home, ".claude"),
    }


def _like_a_model(command):
    """A reply that calls the shell tool with ``command`` unless the request's history holds
    its result (then it says it is done)."""
    call = shell_call(command)

    def build(request):
        if MARK in request.text():  # a tool result, or the driver's word that it ran
            return [Text("the line is there", 1)]
        return call.blocks(request)

    return Reply(build)


def _turn(session, sandbox, workspace, model, command, kill_when):
    """Run a turn whose tool runs ``command``; SIGKILL the bridge once ``kill_when(part)``;
    return the parts, the approvals asked and the file's lines."""
    model.script(*[_like_a_model(command) for _ in range(6)])
    asked = set()
    turn = session.turn("Append the line, please.")
    parts = []
    killed = None
    for part in turn:
        parts.append(part)
        if part.type == "approval-request" and part.tool_call_id not in asked:
            asked.add(part.tool_call_id)
            turn.approve(part)
        if killed is None and kill_when(part):
            killed = sigkill_bridge(sandbox, session.bridge_id)
    assert killed is not None, [(p.type, getattr(p, 'tool_name', None)) for p in parts]
    assert bridge_pid(sandbox, session.bridge_id) not in (None, killed)
    log = os.path.join(workspace, "log.txt")
    lines = open(log).read().splitlines() if os.path.exists(log) else []
    return parts, asked, lines


def _open(agent_program, sandbox, tmp_path, model):
    from host_support import options

    home = str(tmp_path / "agent-home")
    os.makedirs(home)
    opts = options("acp", agent_options={"command": agent_program, "continue_prompt": "Go on please."})
    return bc.create_session(opts, session_options(sandbox, env=_env(model, home), approvals=True))


def test_c24_acp_tool_result_before_the_steps_end_is_not_run_again(
    sandbox, workspace, tmp_path, agent_program, model
):
    with _open(agent_program, sandbox, tmp_path, model) as session:
        parts, asked, lines = _turn(
            session, sandbox, workspace, model,
            "echo line >> log.txt; echo appended-$((40+2))",
            lambda p: p.type == "tool-result",
        )
    assert parts[-1].finish_reason == "stop", parts[-1]
    assert len(lines) == 1, f"the tool ran {len(lines)} times with {len(asked)} approval(s)"
    assert len(asked) == 1, "its result was in the log: no new approval"
    calls = [p.tool_call_id for p in parts if p.type == "tool-call"]
    results = [p.tool_call_id for p in parts if p.type == "tool-result"]
    assert calls[-1:] == results[-1:] and len(set(calls)) == 1, "the one call, given back once"


def test_c24_acp_tool_running_when_the_bridge_dies_is_not_run_again(
    sandbox, workspace, tmp_path, agent_program, model
):
    started = os.path.join(str(workspace), "started")
    with _open(agent_program, sandbox, tmp_path, model) as session:
        parts, asked, lines = _turn(
            session, sandbox, workspace, model,
            "touch started; sleep 2; echo line >> log.txt; echo appended-$((40+2))",
            lambda p: p.type == "approval-answer" and wait_until(lambda: os.path.exists(started), timeout=20),
        )
        log = os.path.join(str(workspace), "log.txt")

        def now():
            return open(log).read().splitlines() if os.path.exists(log) else []

        # A first run the bridge's death did not stop appends its line within its 2 s.
        wait_until(lambda: len(now()) >= 2, timeout=4)
        lines = now()
    assert parts[-1].finish_reason == "stop", parts[-1]
    assert len(lines) <= 1 or len(asked) > 1, (
        f"the tool ran {len(lines)} times with {len(asked)} approval(s)"
    )
    interrupted = [p.data for p in parts if p.type == "data" and p.name == "acp-tool-interrupted"]
    assert len(interrupted) == 1, "the user is told that the running tool call was cut"

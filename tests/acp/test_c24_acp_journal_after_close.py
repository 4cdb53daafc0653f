"""A tool call of an ACP agent (the real claude-code-acp, against the scripted model server)
whose result is in the log is not run again (C24) when the turn a bridge SIGKILL cut is
continued by another host after the first one released (closed) its session: a turn that
exists can always be continued, so the driver's tool journal must outlive the session's close.
The session runs without approvals (the agent's permission requests are allowed): a second
run could not have been approved by the user."""
from __future__ import annotations

import os

import pytest

import bridge_client as bc
from env_support import sigkill_bridge
from host_support import options, session_options
from test_c24_acp_tools_once import _env, _like_a_model

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def agent_program():
    from npm_support import acp_agents_prefix, program

    return program(acp_agents_prefix(), "claude-code-acp")


@pytest.fixture
def model():
    from model_server import ModelServer

    with ModelServer() as server:
        yield server


def test_c24_acp_tool_of_a_cut_turn_continued_after_its_session_closed_is_not_run_again(
    sandbox, workspace, tmp_path, agent_program, model, monkeypatch
):
    home = str(tmp_path / "agent-home")
    os.makedirs(home)
    # The agent's variables in the bridge's own environment (inherited at its launch): a
    # session's env is given by the host that opens it, and the second host opens another.
    for name, value in _env(model, home).items():
        monkeypatch.setenv(name, value.reveal() if isinstance(value, bc.Redacted) else value)
    agent = {"command": agent_program, "continue_prompt": "Go on please.", "permission": "allow"}
    how = session_options(sandbox, resend_window=30.0)
    model.script(*[_like_a_model("echo line >> log.txt; echo appended-$((40+2))") for _ in range(6)])
    with bc.create_session(options("acp", agent_options=agent), how) as session:
        turn = session.turn("Append the line, please.")
        state = None
        for part in turn:
            if isinstance(part, bc.TurnStart):
                state = part.turn
            if part.type == "tool-result":
                sigkill_bridge(sandbox, session.bridge_id)
                break
    # The first host released its session (CloseSession) without reading the turn on.
    assert state is not None
    with bc.create_session(options("acp", agent_options=agent), how) as other:
        parts = list(other.continue_turn(state))
    assert parts[-1].type == "turn-finish" and parts[-1].finish_reason == "stop", parts[-1]
    log = os.path.join(workspace, "log.txt")
    lines = open(log).read().splitlines() if os.path.exists(log) else []
    assert lines == ["line"], f"the tool ran {len(lines)} times"

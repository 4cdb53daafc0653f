"""Interactive turns through the ``acp`` driver: ``session/request_permission`` asked of the
host (approvals on) with our own ACP agent (acp_agent.py ``--ask``) and with the real
``@zed-industries/claude-code-acp`` and the Gemini CLI in ACP mode against the scripted model
server; a cancel answers a pending request ``cancelled``; the policy still answers with
approvals off; a message sent while a prompt runs becomes the next prompt of the same turn."""
from __future__ import annotations

import json
import os
import sys
import threading

import pytest

import bridge_client as bc
from host_support import options, session_options, wait_until

pytestmark = pytest.mark.timeout(120)


def _of(parts, kind):
    return [p for p in parts if p.type == kind]


def _outcomes(store):
    path = os.path.join(store, "permissions.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line)["outcome"] for line in f if line.strip()]


def _answer_each(turn, answer):
    parts = []
    for part in turn:
        parts.append(part)
        if part.type == "approval-request":
            answer(turn, part)
    return parts


@pytest.mark.parametrize(
    "how, option, ran",
    [("once", "yes", True), ("always", "yes-always", True), ("deny", "no", False)],
)
def test_c18_acp_permission_request_is_asked_of_the_host(sandbox, workspace, acp_options, how, option, ran):
    def answer(turn, request):
        if how == "deny":
            turn.deny(request, message="no thanks")
        else:
            turn.approve(request, always=how == "always")

    opts = acp_options("--ask")
    with bc.create_session(opts, session_options(sandbox, approvals=True)) as session:
        parts = _answer_each(session.turn("run echo x > ran.txt"), answer)
    assert parts[-1].finish_reason == "stop", parts[-1]
    (request,) = _of(parts, "approval-request")
    (call,) = _of(parts, "tool-call")
    assert (request.tool_call_id, request.tool_name) == (call.tool_call_id, "execute")
    assert request.input == {"command": "echo x > ran.txt"}
    assert request.title == "`echo x > ran.txt`", "the agent's title of the call"
    assert list(request.choices) == ["allow-always", "allow-once", "deny"], "in the agent's order"
    (answer_part,) = _of(parts, "approval-answer")
    assert answer_part.decision == {"once": "allow-once", "always": "allow-always", "deny": "deny"}[how]
    assert _outcomes(acp_options.store) == [{"outcome": "selected", "optionId": option}]
    assert not [p for p in parts if p.type == "data" and p.name == "acp-permission"], "no policy answered"
    (result,) = _of(parts, "tool-result")
    assert result.is_error is (not ran)
    assert os.path.exists(os.path.join(workspace, "ran.txt")) is ran


def test_c18_acp_cancel_answers_a_pending_permission_cancelled(sandbox, workspace, acp_options):
    opts = acp_options("--ask")
    with bc.create_session(opts, session_options(sandbox, approvals=True)) as session:
        turn = session.turn("run echo x > ran.txt")
        parts = []
        for part in turn:
            parts.append(part)
            if part.type == "approval-request":
                turn.cancel()
    assert parts[-1].finish_reason == "cancelled", parts[-1]
    (answer,) = _of(parts, "approval-answer")
    assert (answer.decision, answer.by) == ("deny", "cancel")
    assert wait_until(lambda: _outcomes(acp_options.store) == [{"outcome": "cancelled"}], timeout=10), (
        _outcomes(acp_options.store)
    )
    assert not os.path.exists(os.path.join(workspace, "ran.txt"))


def test_c18_acp_without_approvals_the_policy_answers(sandbox, workspace, acp_options):
    opts = acp_options("--ask", permission="allow")
    with bc.create_session(opts, session_options(sandbox)) as session:
        parts = list(session.turn("run echo x > ran.txt"))
    assert parts[-1].finish_reason == "stop"
    assert not _of(parts, "approval-request")
    assert [p.data["policy"] for p in parts if p.type == "data" and p.name == "acp-permission"] == ["allow"]
    assert os.path.exists(os.path.join(workspace, "ran.txt"))


def test_c18_acp_message_becomes_the_next_prompt_of_the_turn(sandbox, workspace, acp_options):
    go = os.path.join(workspace, "go")
    with bc.create_session(acp_options(), session_options(sandbox)) as session:
        turn = session.turn(f"wait {go}\nsay first prompt done")
        parts = []
        reader = threading.Thread(target=lambda: parts.extend(turn), daemon=True)
        reader.start()
        assert wait_until(lambda: any(p.type == "reasoning-delta" for p in list(parts)), timeout=30)
        message_id = turn.say("say from the message")
        assert wait_until(lambda: any(p.type == "user-message" for p in list(parts)), timeout=30)
        open(go, "w").close()
        reader.join(60)
        assert not reader.is_alive()
        count = session.turn("count")
        list(count)
    assert parts[-1].finish_reason == "stop", parts[-1]
    (said,) = _of(parts, "user-message")
    assert said.message_id == message_id
    assert turn.text() == "first prompt donefrom the message", turn.text()
    assert "prompts=3" in count.text(), "the message was a prompt of the same ACP session"
    starts = [p.step for p in _of(parts, "step-start")]
    assert starts == sorted(set(starts)) and len(starts) >= 2, "the message's prompt is a step of its own"


# ----------------------------------------------------------------------------- the real agent

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "agents"))
from model_server import ModelServer, shell_call, text_quoting_last_tool_output  # noqa: E402
from npm_support import acp_agents_prefix, program  # noqa: E402


def _env(server, home):
    return {
        "ANTHROPIC_BASE_URL": server.url,
        "ANTHROPIC_API_KEY": bc.Redacted("sk-acp-real-test"),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "IS_SANDBOX": "1",
        "HOME": home,
        "CLAUDE_CONFIG_DIR": os.path.join(home, ".claude"),
    }


@pytest.fixture(scope="module")
def agent_program():
    return program(acp_agents_prefix(), "claude-code-acp")


@pytest.fixture
def model():
    with ModelServer() as server:
        yield server


@pytest.mark.parametrize("allow", [True, False])
def test_c18_acp_real_claude_code_acp_asks_the_host(
    sandbox, workspace, tmp_path, agent_program, model, allow
):
    model.script(shell_call("echo from-acp > acp.txt; echo made-by-acp"), text_quoting_last_tool_output())
    home = str(tmp_path / "agent-home")
    os.makedirs(home)
    opts = options("acp", agent_options={"command": agent_program})  # policy reject: never used

    def answer(turn, request):
        turn.approve(request) if allow else turn.deny(request, message="not that")

    env = _env(model, home)
    with bc.create_session(opts, session_options(sandbox, env=env, approvals=True)) as session:
        parts = _answer_each(session.turn("Make acp.txt"), answer)
    assert parts[-1].finish_reason == "stop", parts[-1]
    (request,) = _of(parts, "approval-request")
    (call,) = _of(parts, "tool-call")
    assert request.tool_call_id == call.tool_call_id and request.tool_name == "execute"
    assert "echo from-acp > acp.txt" in json.dumps(request.input) + (request.title or "")
    assert "allow-once" in request.choices and "deny" in request.choices, request.choices
    (result,) = _of(parts, "tool-result")
    assert result.is_error is (not allow), result
    assert os.path.exists(os.path.join(workspace, "acp.txt")) is allow
    if allow:
        assert "made-by-acp" in json.dumps(result.output)


def test_c18_acp_real_gemini_cli_asks_the_host_in_acp_mode(sandbox, workspace, tmp_path, model):
    """What the gemini driver's refusal points to: the Gemini CLI in ACP mode asks through
    ``session/request_permission``, and a denial keeps its command from running."""
    gemini = program(acp_agents_prefix(), "gemini")
    model.script(shell_call("echo from-gemini > gem.txt"), text_quoting_last_tool_output())
    home = tmp_path / "gemini-home"
    (home / ".gemini").mkdir(parents=True)
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False},
    }
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    env = {
        "HOME": str(home),
        "GEMINI_API_KEY": bc.Redacted("sk-acp-real-test"),
        "GOOGLE_GEMINI_BASE_URL": model.url,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
    }
    opts = options("acp", agent_options={"command": gemini, "args": ["--acp", "--model", "gemini-2.5-flash"]})
    with bc.create_session(opts, session_options(sandbox, env=env, approvals=True)) as session:
        parts = _answer_each(session.turn("Make gem.txt"), lambda t, r: t.deny(r))
    assert parts[-1].finish_reason == "stop", parts[-1]
    (request,) = _of(parts, "approval-request")
    (call,) = _of(parts, "tool-call")
    assert request.tool_call_id == call.tool_call_id and "deny" in request.choices
    assert [a.decision for a in _of(parts, "approval-answer")] == ["deny"]
    assert not os.path.exists(os.path.join(workspace, "gem.txt")), "the denied command did not run"

"""Real ACP agents from npm behind a bridge, offline: ``@zed-industries/claude-code-acp``
(Claude Code through the Claude Agent SDK) and the Gemini CLI in its ACP mode
(``gemini --experimental-acp``), against the scripted model server of tests/agents on
127.0.0.1. Their environment (the model server's URL, the key, a private HOME) is the
session's (C19): nothing is exported to the bridge. Installed by the fixture into a cached
private prefix (tests/acp/npm); skipped, naming why, when npm cannot install them."""
from __future__ import annotations

import json
import os
import sys

import pytest

import bridge_client as bc
from env_support import bridge_pid, sigkill_bridge
from host_support import session_options
from npm_support import acp_agents_prefix, program

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "agents"))
from model_server import ModelServer, hang, shell_call, text, text_quoting_last_tool_output  # noqa: E402

pytestmark = pytest.mark.timeout(120)

KEY = "sk-acp-real-test"


@pytest.fixture(scope="module")
def prefix():
    return acp_agents_prefix()


@pytest.fixture(scope="module")
def agent_program(prefix):
    return program(prefix, "claude-code-acp")


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


def _options(program, **kw):
    from host_support import options

    return options("acp", agent_options={"command": program, "permission": "allow", **kw})


def _of(parts, kind):
    return [p for p in parts if p.type == kind]


def test_acp_real_claude_code_acp_runs_a_tool_and_continues_its_session(
    sandbox, workspace, tmp_path, agent_program, model
):
    model.script(
        shell_call("echo from-acp > acp.txt; echo made-by-acp"),
        text_quoting_last_tool_output(),
        text("second answer"),
    )
    home = str(tmp_path / "agent-home")
    os.makedirs(home)
    env = _env(model, home)
    with bc.create_session(_options(agent_program), session_options(sandbox, env=env)) as session:
        turn = session.turn("Make acp.txt")
        parts = list(turn)
        acp_id = session.state.data["acp_session_id"]
        second = session.turn("And now?")
        second_parts = list(second)
        assert session.state.data["acp_session_id"] == acp_id
    assert parts[-1].finish_reason == "stop", parts[-1]
    (call,) = _of(parts, "tool-call")
    assert call.tool_name == "execute"
    assert call.input["command"] == "echo from-acp > acp.txt; echo made-by-acp"
    (result,) = _of(parts, "tool-result")
    assert result.tool_call_id == call.tool_call_id and not result.is_error
    assert "made-by-acp" in json.dumps(result.output)
    assert turn.text().strip() == "Tool output: made-by-acp"
    assert open(os.path.join(workspace, "acp.txt")).read() == "from-acp\n", "the command ran in the sandbox"
    asked = [p.data for p in parts if p.type == "data" and p.name == "acp-permission"]
    assert asked and asked[0]["outcome"]["outcome"] == "selected", "Claude Code asked; the policy allowed"
    assert second_parts[-1].finish_reason == "stop" and second.text().strip() == "second answer"
    requests = model.agent_requests()
    assert len(requests) == 3
    assert {r.headers.get("x-api-key") for r in requests} == {KEY}, "the key came from the session's env"
    history = requests[2].body["messages"]
    assert "Make acp.txt" in json.dumps(history), "the second turn went on in the same conversation"


def test_b05_acp_real_agent_continues_after_its_bridge_is_sigkilled(
    sandbox, workspace, tmp_path, agent_program, model
):
    """The bridge dies while the model gives its second answer (step 1); the next bridge starts
    claude-code-acp again, loads its session (session/load) and sends the continue prompt: step
    1 runs again, the command of step 0 does not, and the turn ends normally."""
    model.script(
        shell_call("echo once >> log.txt"),
        hang(text("partial answer then more", chunks=3)),
        text("continued after the restart"),
    )
    home = str(tmp_path / "agent-home")
    os.makedirs(home)
    opts = _options(agent_program, continue_prompt="Go on please.")
    with bc.create_session(opts, session_options(sandbox, env=_env(model, home))) as session:
        turn = session.turn("Log once, then tell me something")
        parts = []
        killed = None
        for part in turn:
            parts.append(part)
            if killed is None and part.type == "text-delta":
                assert model.hanging.wait(30), "the model's answer is held open"
                killed = sigkill_bridge(sandbox, session.bridge_id)
                model.release()
        assert bridge_pid(sandbox, session.bridge_id) not in (None, killed)
    assert parts[-1].finish_reason == "stop", parts[-1]
    assert [(r.step, r.discarded_attempt) for r in _of(parts, "step-reset")] == [(1, 1)]
    assert [(p.step, p.attempt) for p in _of(parts, "step-start")][:3] == [(0, 1), (1, 1), (1, 2)]
    assert "continued after the restart" in turn.text(), turn.text()
    assert open(os.path.join(workspace, "log.txt")).read() == "once\n", "step 0's command ran once"
    lost = [p.data for p in parts if p.type == "data" and p.name == "acp-session-lost"]
    assert not lost, f"the ACP session was loaded again: {lost}"
    history = json.dumps(model.agent_requests()[-1].body["messages"])
    assert "Go on please." in history, "the continue prompt went to the loaded session"
    assert "Log once, then tell me something" in history and "once" in history, "with its history"


def test_acp_real_gemini_cli_in_acp_mode(sandbox, workspace, tmp_path, prefix, model):
    """Gemini announces its tool call only in the permission request (no ``tool_call``
    update first) and gives no output in the completed update: the call, the asked
    permission and the result still come out once each."""
    gemini = program(prefix, "gemini")
    model.script(
        shell_call("echo from-gemini > gem.txt; echo made-by-gemini"),
        text_quoting_last_tool_output(),
        text("second answer"),
    )
    home = tmp_path / "gemini-home"
    (home / ".gemini").mkdir(parents=True)
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False},
    }
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    env = {
        "HOME": str(home),
        "GEMINI_API_KEY": bc.Redacted(KEY),
        "GOOGLE_GEMINI_BASE_URL": model.url,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
    }
    opts = _options(gemini, args=["--experimental-acp", "--model", "gemini-2.5-flash"])
    with bc.create_session(opts, session_options(sandbox, env=env)) as session:
        turn = session.turn("Make gem.txt")
        parts = list(turn)
        acp_id = session.state.data["acp_session_id"]
        second = session.turn("And now?")
        second_parts = list(second)
        assert session.state.data["acp_session_id"] == acp_id
    assert parts[-1].finish_reason == "stop", parts[-1]
    (call,) = _of(parts, "tool-call")
    assert call.tool_name == "execute"
    assert call.input == {"title": "echo from-gemini > gem.txt; echo made-by-gemini"}
    (result,) = _of(parts, "tool-result")
    assert result.tool_call_id == call.tool_call_id and not result.is_error
    (asked,) = [p.data for p in parts if p.type == "data" and p.name == "acp-permission"]
    assert asked["toolCallId"] == call.tool_call_id and asked["outcome"]["outcome"] == "selected"
    assert open(os.path.join(workspace, "gem.txt")).read() == "from-gemini\n", "the command ran"
    assert "made-by-gemini" in turn.text()
    assert second_parts[-1].finish_reason == "stop" and "second answer" in second.text()
    requests = model.agent_requests()
    assert {r.headers.get("x-goog-api-key") for r in requests} == {KEY}, "the key came from the session's env"
    assert "Make gem.txt" in requests[-1].text(), "the second turn went on in the same conversation"


def _gemini_env(tmp_path, model):
    home = tmp_path / "gemini-home"
    (home / ".gemini").mkdir(parents=True)
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False},
    }
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    return {
        "HOME": str(home),
        "GEMINI_API_KEY": bc.Redacted(KEY),
        "GOOGLE_GEMINI_BASE_URL": model.url,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
    }


def test_acp_real_gemini_after_a_bridge_sigkill_shows_no_history_and_says_it_lost_it(
    sandbox, workspace, tmp_path, prefix, model
):
    """After a bridge SIGKILL, the next turn of a Gemini ACP session shows only its own
    answer: a loaded session's replayed history (Gemini replays it after answering
    ``session/load``) is dropped, and a session Gemini cannot load (this Gemini CLI empties
    the session's file as it starts to load it: "No previous sessions found") is named in an
    ``acp-session-lost`` part."""
    gemini = program(prefix, "gemini")
    model.script(
        shell_call("echo from-gemini > gem.txt; echo made-by-gemini"),
        text_quoting_last_tool_output(),
        text("second answer"),
    )
    opts = _options(gemini, args=["--experimental-acp", "--model", "gemini-2.5-flash"])
    with bc.create_session(opts, session_options(sandbox, env=_gemini_env(tmp_path, model))) as session:
        first = session.turn("Make gem.txt")
        assert list(first)[-1].finish_reason == "stop"
        acp_id = session.state.data["acp_session_id"]
        sigkill_bridge(sandbox, session.bridge_id)
        second = session.turn("And now?")
        parts = list(second)
    assert parts[-1].finish_reason == "stop", parts[-1]
    assert not _of(parts, "tool-call"), "the replayed tool call was shown again"
    assert second.text() == "second answer", f"the replayed history was shown: {second.text()!r}"
    lost = [p.data for p in parts if p.type == "data" and p.name == "acp-session-lost"]
    if lost:
        assert lost[0]["sessionId"] == acp_id and "No previous sessions" in lost[0]["reason"], lost
    else:
        assert "Make gem.txt" in model.agent_requests()[-1].text(), "the loaded session went on"

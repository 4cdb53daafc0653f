"""Host tools through a real ACP agent (claude-code-acp, against the scripted model server):
the driver gives it the MCP server named ``host`` in ``session/new``'s ``mcpServers``; the
model calls the host tool; the function runs once, in this test's process; the turn yields
HostToolCall and HostToolResult; the model's next request holds the result and the final text
quotes it. The agent keeps its MCP server across turns: a second turn's call is served too.
A tool marked ``approve=True`` is asked through the approval flow."""
from __future__ import annotations

import json
import os
import signal
import sys

import pytest

import bridge_client as bc
from host_support import options, session_options
from npm_support import acp_agents_prefix, program

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "agents"))
from model_server import ModelServer, text_quoting_last_tool_output, tool_call  # noqa: E402

pytestmark = pytest.mark.timeout(180)

KEY = "sk-acp-host-tools-test"


@pytest.fixture(scope="module")
def agent_program():
    return program(acp_agents_prefix(), "claude-code-acp")


@pytest.fixture
def model():
    with ModelServer() as server:
        yield server


def _open(agent_program, sandbox, tmp_path, model, tools, **more):
    home = str(tmp_path / "agent-home")
    os.makedirs(home)
    env = {
        "ANTHROPIC_BASE_URL": model.url,
        "ANTHROPIC_API_KEY": bc.Redacted(KEY),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "IS_SANDBOX": "1",
        "HOME": home,
        "CLAUDE_CONFIG_DIR": os.path.join(home, ".claude"),
    }
    opts = options("acp", agent_options={"command": agent_program})
    so = session_options(sandbox, env=env, launch_timeout=60.0, tools=tools, **more)
    return bc.create_session(opts, so)


def test_c22_acp_agent_calls_a_host_tool_once_in_each_turn(sandbox, tmp_path, agent_program, model):
    calls = []

    def lookup(key: str) -> dict:
        """Look a key up in the application's table.

        Args:
            key: the key to look up.
        """
        calls.append(key)
        return {"key": key, "value": 40 + len(calls)}

    model.script(
        tool_call("mcp__host__lookup", {"key": "alpha"}),
        text_quoting_last_tool_output("Got: "),
        tool_call("mcp__host__lookup", {"key": "beta"}),
        text_quoting_last_tool_output("Then: "),
    )
    with _open(agent_program, sandbox, tmp_path, model, [lookup]) as session:
        first = session.turn("Look alpha up")
        parts = list(first)
        assert first.finish.finish_reason == "stop", first.finish
        second = session.turn("Now beta")
        more = list(second)
        assert second.finish.finish_reason == "stop", second.finish
    assert calls == ["alpha", "beta"], "once per call, in this process"
    (call,) = [p for p in parts if isinstance(p, bc.HostToolCall)]
    assert (call.tool_name, call.input) == ("lookup", {"key": "alpha"})
    (result,) = [p for p in parts if isinstance(p, bc.HostToolResult)]
    assert (result.output, result.is_error, result.by) == ({"key": "alpha", "value": 41}, False, "host")
    assert parts.index(call) < parts.index(result)
    requests = model.agent_requests()
    assert "mcp__host__lookup" in requests[0].text(), "offered to the model"
    assert json.loads(requests[1].tool_outputs()[-1]) == {"key": "alpha", "value": 41}
    assert "Got: " in first.text() and '"value": 41' in first.text()
    (again,) = [p for p in more if isinstance(p, bc.HostToolResult)]
    assert again.output == {"key": "beta", "value": 42}, "the agent's MCP server serves the next turn too"
    assert '"value": 42' in second.text()
    assert model.errors == [], model.errors


@pytest.mark.parametrize("approve, allow", [(True, True), (True, False), (False, True)])
def test_c22_acp_host_tool_marked_approve_is_asked_through_the_approval_flow(
    sandbox, tmp_path, agent_program, model, approve, allow
):
    calls, asked = [], []

    def lookup(key: str) -> str:
        """Look a key up."""
        calls.append(key)
        return f"value of {key}"

    def policy(request):
        asked.append(request.title)
        return allow

    model.script(tool_call("mcp__host__lookup", {"key": "alpha"}), text_quoting_last_tool_output("Got: "))
    tools = [bc.host_tool(lookup, approve=approve)]
    with _open(agent_program, sandbox, tmp_path, model, tools, approve=policy) as session:
        turn = session.turn("Look alpha up")
        parts = list(turn)
    if approve:
        assert asked == ["mcp__host__lookup"], "asked through the approval flow"
    else:
        assert asked == [], "a host tool not marked approve=True runs without asking"
    assert calls == (["alpha"] if allow else []), "run only once allowed"
    results = [p for p in parts if isinstance(p, bc.HostToolResult)]
    assert [r.output for r in results] == (["value of alpha"] if allow else [])


def test_c22_gemini_in_acp_mode_calls_a_host_tool_once(sandbox, tmp_path, model):
    gemini = program(acp_agents_prefix(), "gemini")
    calls = []

    def lookup(key: str) -> dict:
        """Look a key up in the application's table.

        Args:
            key: the key to look up.
        """
        calls.append(key)
        return {"key": key, "value": 42}

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
    # The Gemini CLI offers a tool of an MCP server as mcp_SERVER_TOOL.
    model.script(tool_call("mcp_host_lookup", {"key": "alpha"}), text_quoting_last_tool_output("Got: "))
    args = ["--experimental-acp", "--model", "gemini-2.5-flash"]
    opts = options("acp", agent_options={"command": gemini, "args": args})
    with bc.create_session(opts, session_options(sandbox, env=env, tools=[lookup])) as session:
        turn = session.turn("Look alpha up")
        parts = list(turn)
    assert turn.finish.finish_reason == "stop", turn.finish
    assert calls == ["alpha"], "once, in this process"
    (result,) = [p for p in parts if isinstance(p, bc.HostToolResult)]
    assert (result.output, result.is_error, result.by) == ({"key": "alpha", "value": 42}, False, "host")
    assert "mcp_host_lookup" in dict(model.agent_requests()[0].tools()), "offered to the model"
    assert '"value": 42' in turn.text()
    (asked,) = [p.data for p in parts if p.type == "data" and p.name == "acp-permission"]
    assert asked["title"] == "lookup (host MCP Server)", "Gemini names the tool so"
    assert asked["outcome"] == {"outcome": "selected", "optionId": "proceed_once"}, "allowed once, unasked"


def test_c22_acp_a_bridge_sigkill_while_the_host_function_runs_still_calls_it_once(
    sandbox, tmp_path, agent_program, model
):
    calls = []
    holder = {}

    def lookup(key: str) -> dict:
        """Look a key up."""
        calls.append(key)
        if len(calls) == 1:
            os.kill(holder["session"]._hello.pid, signal.SIGKILL)  # the bridge dies mid-call
        return {"key": key, "value": 7}

    model.script(
        tool_call("mcp__host__lookup", {"key": "alpha"}),
        tool_call("mcp__host__lookup", {"key": "alpha"}),  # the loaded session calls it again
        text_quoting_last_tool_output("Got: "),
    )
    with _open(agent_program, sandbox, tmp_path, model, [lookup], resend_window=30.0) as session:
        holder["session"] = session
        first = None
        turn = session.turn("Look alpha up")
        parts = []
        for part in turn:
            parts.append(part)
            first = first or session._hello.pid
        assert session._hello.pid != first, "the bridge was launched again"
    assert turn.finish.finish_reason == "stop", turn.finish
    assert calls == ["alpha"], "the function ran once across the bridge's death"
    results = [p for p in parts if isinstance(p, bc.HostToolResult)]
    assert [r.output for r in results] == [{"key": "alpha", "value": 7}], "one recorded result"
    assert '"value": 7' in model.agent_requests()[-1].tool_outputs()[-1]
    assert "Got: " in turn.text()

"""Host tools through the real agent CLIs (Claude Code: ``--mcp-config``; Codex: its
``mcp_servers`` configuration; both start the MCP server named ``host``), offline against the
scripted model server: the model calls the host tool; the function runs once, in this test's
process; its result is in the model's next request; an exception comes back as an error result
and the turn goes on."""
from __future__ import annotations

import json
import os
import signal

import pytest

import bridge_client as bc
from host_support import options, session_options
from model_server import text_quoting_last_tool_output, tool_call

pytestmark = pytest.mark.timeout(150)


def _session(sandbox, cli, tools):
    return bc.create_session(
        options(cli.driver, agent_options=cli.agent_options),
        session_options(sandbox, launch_timeout=60.0, resend_window=30.0, tools=tools),
    )


def test_c22_claude_code_calls_a_host_tool_through_the_host_mcp_server(real_cli, model, sandbox):
    cli = real_cli("claude-code")
    calls = []

    def lookup(key: str) -> dict:
        """Look a key up in the application's table.

        Args:
            key: the key to look up.
        """
        calls.append(key)
        return {"key": key, "value": 42}

    def explode(why: str) -> str:
        """Fail on purpose."""
        raise RuntimeError(f"broken {why}")

    model.script(
        tool_call("mcp__host__lookup", {"key": "alpha"}),
        text_quoting_last_tool_output("Got: "),
        tool_call("mcp__host__explode", {"why": "now"}),
        text_quoting_last_tool_output("Then: "),
    )
    with _session(sandbox, cli, [lookup, explode]) as session:
        first = session.turn("Look alpha up")
        parts = list(first)
        assert first.finish.finish_reason == "stop", first.finish
        second = session.turn("Now break it")
        more = list(second)
        assert second.finish.finish_reason == "stop", second.finish
    assert calls == ["alpha"], "once, in this process"
    requests = model.agent_requests()
    # Claude Code may defer MCP tools (offered by name, their schema fetched on use).
    assert "mcp__host__lookup" in requests[0].text()
    assert json.loads(requests[1].tool_outputs()[-1]) == {"key": "alpha", "value": 42}
    assert "Got: " in first.text()
    (result,) = [p for p in parts if isinstance(p, bc.HostToolResult)]
    assert (result.output, result.is_error, result.by) == ({"key": "alpha", "value": 42}, False, "host")
    assert [p.tool_name for p in parts if isinstance(p, bc.ToolCall)] == ["mcp__host__lookup"]
    (failed,) = [p for p in more if isinstance(p, bc.HostToolResult)]
    assert failed.is_error and failed.output == "RuntimeError: broken now"
    assert "RuntimeError: broken now" in requests[3].tool_outputs()[-1]
    assert model.errors == [], model.errors


def test_c22_codex_calls_a_host_tool_through_the_host_mcp_server(real_cli, model, sandbox):
    cli = real_cli("codex")
    calls = []

    def lookup(key: str) -> dict:
        """Look a key up in the application's table.

        Args:
            key: the key to look up.
        """
        calls.append(key)
        return {"key": key, "value": 42}

    # Codex offers MCP tools as a namespace tool (mcp__host) whose functions the model calls.
    model.script(tool_call("mcp__host/lookup", {"key": "alpha"}), text_quoting_last_tool_output("Got: "))
    with _session(sandbox, cli, [lookup]) as session:
        turn = session.turn("Look alpha up")
        parts = list(turn)
    requests = model.agent_requests()
    assert turn.finish.finish_reason == "stop", turn.finish
    assert "mcp__host" in dict(requests[0].tools())
    assert calls == ["alpha"], "once, in this process"
    (result,) = [p for p in parts if isinstance(p, bc.HostToolResult)]
    assert (result.output, result.is_error) == ({"key": "alpha", "value": 42}, False)
    assert "42" in requests[1].tool_outputs()[-1]
    assert "Got: " in turn.text()


_CALL_NAME = {"claude-code": "mcp__host__lookup", "codex": "mcp__host/lookup"}


@pytest.mark.parametrize("driver", ["claude-code", "codex"])
def test_c22_real_cli_a_bridge_sigkill_while_the_function_runs_still_calls_it_once(
    driver, real_cli, model, sandbox
):
    cli = real_cli(driver)
    calls = []
    holder = {}

    def lookup(key: str) -> dict:
        """Look a key up."""
        calls.append(key)
        if len(calls) == 1:
            os.kill(holder["session"]._hello.pid, signal.SIGKILL)  # the bridge dies mid-call
        return {"key": key, "value": 7}

    model.script(
        tool_call(_CALL_NAME[driver], {"key": "alpha"}),
        tool_call(_CALL_NAME[driver], {"key": "alpha"}),  # the resumed CLI calls it again
        text_quoting_last_tool_output("Got: "),
    )
    with _session(sandbox, cli, [lookup]) as session:
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
    assert any(isinstance(p, bc.StepReset) for p in parts)
    assert '"value": 7' in model.agent_requests()[-1].tool_outputs()[-1]
    assert "Got: " in turn.text()


def test_c22_qwen_calls_a_host_tool_from_its_settings_mcp_servers(real_cli, model, sandbox):
    driver = "qwen"
    cli = real_cli(driver)
    calls = []

    def lookup(key: str) -> dict:
        """Look a key up in the application's table.

        Args:
            key: the key to look up.
        """
        calls.append(key)
        return {"key": key, "value": 42}

    model.script(tool_call(_MCP_NAME[driver], {"key": "alpha"}), text_quoting_last_tool_output("Got: "))
    with _session(sandbox, cli, [lookup]) as session:
        turn = session.turn("Look alpha up")
        parts = list(turn)
    requests = model.agent_requests()
    assert _MCP_NAME[driver] in requests[0].text(), "offered (Qwen Code may defer it behind tool_search)"
    assert turn.finish.finish_reason == "stop", turn.finish
    assert calls == ["alpha"], "once, in this process"
    (result,) = [p for p in parts if isinstance(p, bc.HostToolResult)]
    assert (result.output, result.is_error) == ({"key": "alpha", "value": 42}, False)
    assert "42" in requests[1].tool_outputs()[-1]
    assert "Got: " in turn.text()


_MCP_NAME = {"qwen": "mcp__host__lookup"}


def test_c22_gemini_calls_a_host_tool_from_its_system_settings_mcp_servers(real_cli, model, sandbox):
    cli = real_cli("gemini")
    calls = []

    def lookup(key: str) -> dict:
        """Look a key up in the application's table.

        Args:
            key: the key to look up.
        """
        calls.append(key)
        return {"key": key, "value": 42}

    # The Gemini CLI offers a tool of an MCP server as mcp_SERVER_TOOL.
    model.script(tool_call("mcp_host_lookup", {"key": "alpha"}), text_quoting_last_tool_output("Got: "))
    with _session(sandbox, cli, [lookup]) as session:
        turn = session.turn("Look alpha up")
        parts = list(turn)
    requests = model.agent_requests()
    assert "mcp_host_lookup" in dict(requests[0].tools()), "offered to the model"
    assert turn.finish.finish_reason == "stop", turn.finish
    assert calls == ["alpha"], "once, in this process"
    (result,) = [p for p in parts if isinstance(p, bc.HostToolResult)]
    assert (result.output, result.is_error) == ({"key": "alpha", "value": 42}, False)
    assert "42" in requests[1].tool_outputs()[-1]
    assert "Got: " in turn.text()


@pytest.mark.parametrize("approve, allow", [(True, True), (True, False), (False, True)])
def test_c22_claude_code_asks_before_a_host_tool_marked_approve(real_cli, model, sandbox, approve, allow):
    cli = real_cli("claude-code")
    calls = []

    def lookup(key: str) -> str:
        """Look a key up."""
        calls.append(key)
        return f"value of {key}"

    def policy(request):
        asked.append((request.tool_name, request.input))
        return allow

    asked = []
    model.script(tool_call("mcp__host__lookup", {"key": "alpha"}), text_quoting_last_tool_output("Got: "))
    so = session_options(
        sandbox, launch_timeout=60.0, tools=[bc.host_tool(lookup, approve=approve)], approve=policy
    )
    with bc.create_session(options("claude-code", agent_options=cli.agent_options), so) as session:
        turn = session.turn("Look alpha up")
        parts = list(turn)
    assert turn.finish.finish_reason == "stop", turn.finish
    if approve:
        assert asked == [("mcp__host__lookup", {"key": "alpha"})], "asked through the approval flow"
    else:
        assert asked == [], "a host tool not marked approve=True is allowed without asking"
    assert calls == (["alpha"] if allow else []), "run only once allowed"
    results = [p for p in parts if isinstance(p, bc.HostToolResult)]
    assert [r.output for r in results] == (["value of alpha"] if allow else [])

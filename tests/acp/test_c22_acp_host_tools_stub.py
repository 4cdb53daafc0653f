"""The ``acp`` driver's host tools against our own ACP agent (acp_agent.py): ``session/new``
carries the MCP server named ``host`` in ACP's stdio form (name, command, args, env as
name/value pairs) next to the ``mcp_servers`` option's; that server, started from what the
agent got, lists the session's host tools while the agent lives (its relay lives as long as
the agent, past the turn); an agent that says it takes no stdio MCP servers gets no session:
the turn ends with an error saying so, and the function is never called."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

import bridge_client as bc
from host_support import session_options

pytestmark = pytest.mark.timeout(60)


def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: the key to look up.
    """
    raise AssertionError("never called here")


def _mcp(server, *requests):
    """Run the MCP server of ``server`` (ACP's stdio form) with ``requests``; its answers."""
    env = {**os.environ, **{e["name"]: e["value"] for e in server["env"]}}
    lines = "".join(json.dumps(r) + "\n" for r in requests)
    done = subprocess.run(
        [server["command"], *server["args"]], input=lines, env=env, capture_output=True, text=True, timeout=20
    )
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def test_c22_acp_session_new_carries_the_host_mcp_server(sandbox, acp_options):
    mine = {"name": "mine", "command": "true", "args": [], "env": []}
    opts = acp_options(mcp_servers=[mine])
    with bc.create_session(opts, session_options(sandbox, tools=[lookup])) as session:
        turn = session.turn("say hello")
        list(turn)
        assert turn.finish.finish_reason == "stop", turn.finish
        sid = session.state.data["acp_session_id"]
        with open(os.path.join(acp_options.store, f"{sid}.json")) as f:
            servers = json.load(f)["mcpServers"]
        assert servers[0] == mine, "the mcp_servers option's own come first"
        host = servers[1]
        assert host["name"] == "host" and host["args"] == ["-m", "bridge_client.drivers.mcp_host"]
        assert {e["name"] for e in host["env"]} >= {"BRIDGE_CLIENT_HOST_RELAY", "BRIDGE_CLIENT_HOST_TOKEN"}
        version = {"protocolVersion": "2025-06-18"}
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": version}
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
        answers = _mcp(host, init, listing)
        tools = answers[-1]["result"]["tools"]
        assert [t["name"] for t in tools] == ["lookup"], "served after the turn: the agent still runs"
    relay = next(e["value"] for e in host["env"] if e["name"] == "BRIDGE_CLIENT_HOST_RELAY")
    assert not os.path.exists(relay), "the relay is gone with the agent"


def test_c22_acp_session_without_tools_gives_the_agent_no_host_server(sandbox, acp_options):
    with bc.create_session(acp_options(), session_options(sandbox)) as session:
        list(session.turn("say hello"))
        sid = session.state.data["acp_session_id"]
    with open(os.path.join(acp_options.store, f"{sid}.json")) as f:
        assert json.load(f)["mcpServers"] == []


def test_c22_acp_agent_without_stdio_mcp_servers_refuses_host_tools(sandbox, acp_options):
    so = session_options(sandbox, tools=[lookup])
    with bc.create_session(acp_options("--no-mcp-stdio"), so) as session:
        turn = session.turn("say hello")
        parts = list(turn)
    assert turn.finish.finish_reason == "error", turn.finish
    assert "takes no stdio MCP servers" in (turn.finish.error or ""), turn.finish
    assert not [p for p in parts if p.type == "text-delta"], "no prompt was sent"


@pytest.mark.parametrize("flags", [(), ("--no-mcp-stdio",)])
def test_c22_acp_agent_without_host_tools_needs_no_stdio_mcp_servers(sandbox, acp_options, flags):
    with bc.create_session(acp_options(*flags), session_options(sandbox)) as session:
        turn = session.turn("say hello")
        list(turn)
    assert turn.finish.finish_reason == "stop", turn.finish

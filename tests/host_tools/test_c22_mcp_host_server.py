"""The MCP server named ``host`` against the official ``mcp`` Python SDK's client: a real
bridge, whose test driver (tests/host_tools/mcp_probe_driver.py) runs the SDK client over stdio
against ``python -m bridge_client.drivers.mcp_host``, relaying to the bridge's socket; the
function runs in this test's process. And the relay refuses a request without the token."""
from __future__ import annotations

import json
import socket

import pytest

import bridge_client as bc
from host_support import options, session_options

mcp = pytest.importorskip("mcp", reason="the mcp SDK (Python >= 3.10; the test extra) is not installed")

pytestmark = pytest.mark.timeout(90)


def test_c22_the_mcp_sdk_lists_and_calls_host_tools_through_the_host_server(sandbox, model):
    calls = []

    def lookup(key: str, limit: int = 3) -> dict:
        """Look a key up.

        Args:
            key: the key.
        """
        calls.append((key, limit))
        return {"key": key, "limit": limit}

    def explode() -> str:
        """Fail."""
        raise KeyError("gone")

    opts = options("mcp_probe_driver:make_driver", agent_id="mcp-probe")
    prompt = 'lookup {"key": "alpha", "limit": 2}\nexplode {}'
    with bc.create_session(opts, session_options(sandbox, tools=[lookup, explode])) as session:
        turn = session.turn(prompt)
        parts = list(turn)
    errors = [p.data for p in parts if isinstance(p, bc.Data) and p.name == "mcp-error"]
    assert turn.finish.finish_reason == "stop", errors
    assert calls == [("alpha", 2)], "once, in this process"
    (listed,) = [p.data for p in parts if isinstance(p, bc.Data) and p.name == "mcp-tools"]
    assert [t["name"] for t in listed] == ["lookup", "explode"]
    assert listed[0]["description"] == "Look a key up."
    assert listed[0]["inputSchema"]["properties"]["key"] == {"type": "string", "description": "the key."}
    results = {p.tool_name: p.output for p in parts if isinstance(p, bc.ToolResult)}
    assert results["lookup"] == {"text": [json.dumps({"key": "alpha", "limit": 2})], "isError": False}
    assert results["explode"] == {"text": ["KeyError: 'gone'"], "isError": True}
    host_results = [p for p in parts if isinstance(p, bc.HostToolResult)]
    assert [(r.tool_name, r.is_error) for r in host_results] == [("lookup", False), ("explode", True)]


def test_the_relay_serves_only_requests_with_its_token():
    from bridge_client.bridge.host_relay import HostRelay

    relay = HostRelay(ctx=object())  # no session behind it: it lists no tools
    try:
        def ask(request):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.connect(relay.path)
                conn.sendall(json.dumps(request).encode() + b"\n")
                return json.loads(conn.makefile().readline())

        assert ask({"op": "list"}) == {"error": "not this session's relay"}
        wrong = relay.token[:-1] + ("1" if relay.token[-1] == "0" else "0")
        assert ask({"op": "list", "token": wrong}) == {"error": "not this session's relay"}
        assert ask({"op": "list", "token": relay.token}) == {"tools": []}
        assert ask({"op": "nope", "token": relay.token}) == {"error": "unknown op 'nope'"}
    finally:
        relay.close()

"""A driver whose agent is the official ``mcp`` Python SDK's client: in its step it starts the
bridge's relay, launches the MCP server named ``host`` (``python -m
bridge_client.drivers.mcp_host``) over stdio as an agent's CLI would, initializes, lists the
tools and calls each host tool named in the prompt (``NAME JSON-ARGUMENTS`` per line), and
reports what the SDK got as tool-call/tool-result parts and a ``data`` part ``mcp-tools``.
``mcp_probe_driver:make_driver`` (agent id ``mcp-probe``)."""
from __future__ import annotations

import asyncio
import json
import traceback
from typing import Any, Dict, List

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from bridge_client.bridge.host_relay import mcp_server_config, start_relay


class McpProbeDriver:
    """See the module docstring."""

    agent_id = "mcp-probe"
    supports_host_tools = True

    def initial_state(self) -> Any:
        return None

    def run_turn(self, ctx: Any) -> None:
        ctx.start_step()
        relay = start_relay(ctx)
        assert relay is not None, "the session has no host tools"
        try:
            config = mcp_server_config(relay)
            listed, results = asyncio.run(_probe(config, ctx.prompt))
        except BaseException as exc:  # say what failed inside the SDK's task group
            ctx.data("mcp-error", "".join(traceback.format_exception(exc)))
            raise
        finally:
            relay.close()
        ctx.data("mcp-tools", listed)
        for i, (name, args, result) in enumerate(results):
            ctx.tool_call(f"mcp-{i}", name, args)
            ctx.tool_result(f"mcp-{i}", name, result, bool(result["isError"]))
        ctx.finish_step()


async def _probe(config: Dict[str, Any], prompt: str):
    params = StdioServerParameters(command=config["command"], args=config["args"], env=config["env"])
    results: List[Any] = []
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            assert _field(init, "server_info", "serverInfo").name == "host"
            tools = await session.list_tools()
            listed = [
                {
                    "name": t.name,
                    "description": t.description,
                    "inputSchema": _field(t, "input_schema", "inputSchema"),
                }
                for t in tools.tools
            ]
            for line in prompt.splitlines():
                name, _, args = line.partition(" ")
                arguments = json.loads(args) if args.strip() else {}
                got = await session.call_tool(name, arguments)
                texts = [c.text for c in got.content if getattr(c, "type", "") == "text"]
                is_error = bool(_field(got, "is_error", "isError"))
                results.append((name, arguments, {"text": texts, "isError": is_error}))
            await session.send_ping()
    return listed, results


def _field(value: Any, snake: str, camel: str) -> Any:
    """A field of an SDK value (snake_case in mcp 2, camelCase in mcp 1)."""
    return getattr(value, snake) if hasattr(value, snake) else getattr(value, camel)


def make_driver(options: Any) -> McpProbeDriver:
    return McpProbeDriver()

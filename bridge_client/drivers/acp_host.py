"""Host tools for the ``acp`` driver: the MCP server named ``host`` in the ``mcpServers`` of
``session/new`` and ``session/load``, and the permission its calls need.

ACP (protocol version 1) gives an agent its MCP servers when a session is opened, in the
stdio form ``{"name", "command", "args", "env": [{"name", "value"}]}``; every ACP agent must
take that form (the ``mcpCapabilities`` of ``initialize`` name only the optional ``http`` and
``sse`` ones). The agent keeps the servers for the session's life, across turns, so the relay
(:class:`AgentRelay`) lives as long as the agent process: opened when the driver starts the
agent for a session with host tools, given each turn's context as the turn starts, closed when
the agent is stopped.

An agent that says it takes no stdio MCP servers (``mcpCapabilities.stdio`` present and
false: a later protocol's form) cannot call host tools: :func:`check_stdio` refuses the turn.

A permission the agent asks for a call of a host tool (``session/request_permission`` whose
``toolCall`` title names it as ``mcp__host__NAME``, the name Claude Code gives it, or as
``NAME (host MCP Server)``, the Gemini CLI's form, or whose ``rawInput`` names the server
``host`` and the tool, codex-acp's form, or titled ``host__NAME: INPUT``, Cline's, or
whose call was announced as ``host-NAME``, Copilot's) is allowed by the driver when the tool is
not marked ``approve=True`` (:func:`host_tool_asked`), as the ``claude-code`` driver allows
its host tools; a tool marked ``approve=True`` goes through the driver's permission policy,
or the host's approval flow with approvals on.
"""
from __future__ import annotations

import re
from typing import Any, Dict, List, Optional

from ..bridge.host_calls import host_tools
from ..bridge.host_relay import mcp_server_config
from .mcp_config import SERVER_NAME, AgentRelay

__all__ = ["AgentRelay", "open_relay", "mcp_servers", "check_stdio", "host_tool_asked"]


def open_relay(ctx: Any) -> Optional[AgentRelay]:
    """A relay for the agent the driver starts for ``ctx``'s session, when the session has
    host tools; else ``None``."""
    return AgentRelay(ctx) if host_tools(ctx) else None


def mcp_servers(relay: Optional[AgentRelay]) -> List[Dict[str, Any]]:
    """The ``host`` server in ACP's stdio form (``[]`` without a relay)."""
    if relay is None:
        return []
    config = mcp_server_config(relay)
    env = [{"name": k, "value": v} for k, v in config["env"].items()]
    return [{"name": SERVER_NAME, "command": config["command"], "args": config["args"], "env": env}]


def check_stdio(capabilities: Dict[str, Any]) -> Optional[str]:
    """Why an agent of these ``agentCapabilities`` cannot call host tools, or ``None``."""
    mcp = capabilities.get("mcpCapabilities")
    if isinstance(mcp, dict) and "stdio" in mcp and not mcp["stdio"]:
        return (
            "the ACP agent takes no stdio MCP servers (its mcpCapabilities), so it cannot call "
            "host tools: create the session without tools"
        )
    return None


def host_tool_asked(ctx: Any, title: Any, raw_input: Any = None, announced: Any = None) -> bool:
    """Whether a permission request titled ``title`` (its tool call's ``rawInput``:
    ``raw_input``; the title the call was announced with before: ``announced``) is for a host
    tool that runs without asking (one not marked ``approve=True``)."""
    name = _asked_name(title, raw_input)
    if name is None and isinstance(announced, str) and announced.startswith(f"{SERVER_NAME}-"):
        name = announced[len(SERVER_NAME) + 1:]  # Copilot: "host-NAME", then asked as "NAME"
    return name is not None and any(t["name"] == name and not t.get("approve") for t in host_tools(ctx))


_CODEX_ASK = re.compile(r'run tool "([^"]+)"')


def _asked_name(title: Any, raw_input: Any) -> Optional[str]:
    prefix, suffix = f"mcp__{SERVER_NAME}__", f" ({SERVER_NAME} MCP Server)"
    if isinstance(title, str) and title.startswith(prefix):
        return title[len(prefix):]
    if isinstance(title, str) and title.endswith(suffix):
        return title[: -len(suffix)]
    if isinstance(title, str) and title.startswith(f"{SERVER_NAME}__"):  # Cline: 'host__NAME: {...}'
        return title[len(SERVER_NAME) + 2:].split(":", 1)[0]
    # codex-acp: {"server_name": "host", "request": {"message": 'Allow ... run tool "NAME"?'}}
    if isinstance(raw_input, dict) and raw_input.get("server_name") == SERVER_NAME:
        request = raw_input.get("request")
        message = request.get("message") if isinstance(request, dict) else None
        found = _CODEX_ASK.search(message) if isinstance(message, str) else None
        return found.group(1) if found else None
    return None

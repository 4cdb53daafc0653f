"""Host tools in the ``openai`` driver: native function tools (no MCP).

The session's host tools join the request's ``tools`` as Chat Completions function tools (their
name, description and argument schema as the host gave them); a tool call of one of them is
a host tool call (:func:`~bridge_client.bridge.host_calls.call_host_tool`): the host runs the
function, and its result goes back to the model as the tool message, like any tool's.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ..bridge.context import TurnContext
from ..bridge.host_calls import call_host_tool, host_tools

__all__ = ["function_specs", "run_host_tool"]


def function_specs(ctx: TurnContext) -> List[Dict[str, Any]]:
    """The session's host tools as Chat Completions ``tools`` entries (empty without any)."""
    return [
        {
            "type": "function",
            "function": {
                "name": t["name"],
                "description": t["description"],
                "parameters": t["inputSchema"],
            },
        }
        for t in host_tools(ctx)
    ]


def run_host_tool(ctx: TurnContext, call_id: str, name: str, args: Any) -> Optional[Tuple[Any, bool]]:
    """Run the tool call as a host tool call when ``name`` is one of the session's host
    tools: ``(output, is_error)`` once the result is recorded; ``None`` for any other tool."""
    if not any(t["name"] == name for t in host_tools(ctx)):
        return None
    return call_host_tool(ctx, call_id, name, args)

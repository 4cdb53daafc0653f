"""The parts of host tool calls: ``host-tool-call``, ``host-tool-start`` and
``host-tool-result`` (see :doc:`protocol`, "Host tools"), and the payload checks of the two
RPCs a host answers a call with (``ClaimHostTool``, ``AnswerHostTool``).

Registered with the other part types when :mod:`bridge_client.wire` is imported. Pure: no I/O.
"""
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping

from ..errors import BadRequest, ProtocolError
from .decode import _any, _bool, _str
from .parts import Part, _part
from .rpcs import CATALOGUE, Rpc, _payload, check_id
from .slotted import _JSON_VALUE

__all__ = [
    "HostToolCall",
    "HostToolStart",
    "HostToolResult",
    "HOST_TOOL_DECIDERS",
    "check_claim_host_tool",
    "check_answer_host_tool",
    "check_host_tools",
    "CLAIM_HOST_TOOL",
    "ANSWER_HOST_TOOL",
    "MAX_HOST_TOOLS",
]

HOST_TOOL_DECIDERS = ("host", "timeout", "host-lost", "cancel")
"""Who gave a ``host-tool-result`` (``by``): the host that ran the function; the bridge when
no host answered within the tool timeout, when the host was lost while the function ran
(and the tool may not run again), or when the turn was cancelled."""

_TOOL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}\Z")

MAX_HOST_TOOLS = 128
"""A session has at most this many host tools."""


def _decider(d: Mapping[str, Any], key: str, where: str) -> str:
    value = _str(d, key, where)
    if value not in HOST_TOOL_DECIDERS:
        raise ProtocolError(f"{where}.{key} must be one of {', '.join(HOST_TOOL_DECIDERS)}")
    return value


@_part(
    "host-tool-call",
    ("call_id", "callId", _str),
    ("tool_call_id", "toolCallId", _str),
    ("tool_name", "toolName", _str),
    ("input", "input", _any),
)
@dataclass(frozen=True)
class HostToolCall(Part):
    """The agent calls a host tool: the host that reads the turn runs the function.

    Attributes:
        call_id: the call's id, made by the bridge; one call id runs the function at most
            once. tool_call_id: the agent's own id of the tool call. tool_name: the host
            tool's name. input: the arguments (a JSON object).

    The host answers it for you when the session has the tool (``CreateSessionOptions(tools=...)``):
    the ``host-tool-result`` part that follows records the result the agent got.
    """

    call_id: str
    tool_call_id: str
    tool_name: str
    input: Any = field(metadata=_JSON_VALUE)


@_part("host-tool-start", ("call_id", "callId", _str), ("host_id", "hostId", _str))
@dataclass(frozen=True)
class HostToolStart(Part):
    """A host took a host tool call and is running its function (``host_id``: which host;
    a host that continues the turn later knows from it that the call may have run)."""

    call_id: str
    host_id: str


@_part(
    "host-tool-result",
    ("call_id", "callId", _str),
    ("tool_name", "toolName", _str),
    ("output", "output", _any),
    ("is_error", "isError", _bool),
    ("by", "by", _decider),
)
@dataclass(frozen=True)
class HostToolResult(Part):
    """The result of a host tool call, as the agent gets it (recorded before it does).

    Attributes:
        call_id: the call. tool_name: the tool. output: the function's JSON value or text, or
            the error's text. is_error: the function raised, or no result came. by: ``host``,
            ``timeout``, ``host-lost`` or ``cancel`` (see :doc:`protocol`, "Host tools").
    """

    call_id: str
    tool_name: str
    output: Any = field(metadata=_JSON_VALUE)
    is_error: bool
    by: str = "host"


def _ids(payload: Any, *keys: str) -> Dict[str, Any]:
    p = _payload(payload, ("sessionId", "turnId", "callId") + keys)
    return {
        "session_id": check_id(p["sessionId"], "sessionId"),
        "turn_id": check_id(p["turnId"], "turnId"),
        "call_id": check_id(p["callId"], "callId"),
    }


def check_claim_host_tool(payload: Any) -> Dict[str, Any]:
    """``ClaimHostTool``: ``{sessionId, turnId, callId, hostId, retry}``.

    Raises:
        BadRequest: not of that shape.
    """
    out = _ids(payload, "hostId")
    out["host_id"] = check_id(payload["hostId"], "hostId")
    retry = payload.get("retry", False)
    if not isinstance(retry, bool):
        raise BadRequest("retry must be a boolean")
    out["retry"] = retry
    return out


def check_answer_host_tool(payload: Any) -> Dict[str, Any]:
    """``AnswerHostTool``: ``{sessionId, turnId, callId, output, isError}``.

    Raises:
        BadRequest: not of that shape.
    """
    out = _ids(payload, "output")
    is_error = payload.get("isError", False)
    if not isinstance(is_error, bool):
        raise BadRequest("isError must be a boolean")
    out["output"] = payload["output"]
    out["is_error"] = is_error
    return out


def check_host_tools(value: Any) -> List[Dict[str, Any]]:
    """Check ``OpenSession.interactive.hostTools``: a list of ``{"name", "description",
    "inputSchema", "approve", "retryOnHostLoss"}`` with unique names (``None`` is none).

    Returns:
        The list, each entry with all five keys.

    Raises:
        BadRequest: not of that shape.
    """
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_HOST_TOOLS:
        raise BadRequest(f"interactive.hostTools must be an array of at most {MAX_HOST_TOOLS} tools")
    out: List[Dict[str, Any]] = []
    names = set()
    for tool in value:
        if not isinstance(tool, dict):
            raise BadRequest("interactive.hostTools: each tool must be an object")
        name = tool.get("name")
        if not isinstance(name, str) or not _TOOL_NAME.match(name) or name in names:
            raise BadRequest(f"interactive.hostTools: bad or repeated tool name {str(name)[:70]!r}")
        names.add(name)
        schema = tool.get("inputSchema", {"type": "object"})
        description = tool.get("description", "")
        if not isinstance(schema, dict) or not isinstance(description, str):
            raise BadRequest(
                f"interactive.hostTools: tool {name!r} needs a description and an inputSchema object"
            )
        flags = {k: tool.get(k, False) for k in ("approve", "retryOnHostLoss")}
        if not all(isinstance(v, bool) for v in flags.values()):
            raise BadRequest(
                f"interactive.hostTools: tool {name!r}: approve and retryOnHostLoss are booleans"
            )
        out.append({"name": name, "description": description, "inputSchema": schema, **flags})
    return out


CLAIM_HOST_TOOL = Rpc(
    "ClaimHostTool",
    stream=False,
    resend=True,  # idempotent by call id and host id
    errors=("TurnNotFound", "HostToolCallNotFound", "BadRequest"),
    check=check_claim_host_tool,
)
ANSWER_HOST_TOOL = Rpc(
    "AnswerHostTool",
    stream=False,
    resend=True,  # idempotent by call id: the recorded result comes back
    errors=("TurnNotFound", "HostToolCallNotFound", "BadRequest"),
    check=check_answer_host_tool,
)
CATALOGUE[CLAIM_HOST_TOOL.tag] = CLAIM_HOST_TOOL
CATALOGUE[ANSWER_HOST_TOOL.tag] = ANSWER_HOST_TOOL

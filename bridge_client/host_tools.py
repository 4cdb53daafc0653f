"""Host tools: plain Python functions the agent calls, run in the host process.

:func:`host_tool` describes one (its name, description and argument schema, from the
function unless given); ``CreateSessionOptions(tools=[fn or HostTool, ...])`` gives them to a
session; :func:`check_tools` checks a list of them. :meth:`HostTool.run` calls the function
with the agent's JSON arguments and turns what happens into the result the agent sees. See
the *Host tools* guide (:doc:`host-tools`).
"""
from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, Optional, Tuple

from .errors import BadHostTool
from .tool_schema import convert_arguments, first_paragraph, function_schema

__all__ = [
    "HostTool", "host_tool", "check_tools", "DEFAULT_TOOL_TIMEOUT", "MAX_TOOL_NAME", "MAX_RESULT_BYTES"
]

log = logging.getLogger("bridge_client")

DEFAULT_TOOL_TIMEOUT = 600.0
"""Seconds a host tool call waits for a host to answer it, by default (10 minutes)."""

MAX_TOOL_NAME = 64
"""A host tool's name is 1 to 64 characters of letters, digits, ``_`` and ``-``."""

MAX_RESULT_BYTES = 1024 * 1024
"""A host tool's result is at most 1 MiB of JSON (UTF-8); a bigger one is an error result."""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}\Z")


@dataclass(frozen=True)
class HostTool:
    """A function the agent may call, run in the host process (made by :func:`host_tool`).

    Attributes:
        fn: the function; called with the agent's arguments as keyword arguments, in the
            thread that reads the turn.
        name: what the agent calls it (``str``, 1 to 64 letters, digits, ``_``, ``-``,
            starting with a letter or ``_``).
        description: what it does, for the agent (``str``).
        schema: the JSON Schema of its arguments (an ``object`` schema, a ``dict``).
        approve: ``True`` makes the agent ask through the approval flow before each call
            (with drivers that ask; see :doc:`host-tools`).
        retry_on_host_loss: ``True`` when calling it again is safe: a call whose host was lost
            while the function ran runs again in the host that continues the turn. ``False``
            (the default): that call gets an error result saying it may or may not have
            completed.
    """

    fn: Callable[..., Any]
    name: str
    description: str
    schema: Dict[str, Any] = field(hash=False)
    approve: bool = False
    retry_on_host_loss: bool = False

    def spec(self) -> Dict[str, Any]:
        """The tool as ``OpenSession`` sends it: ``{"name", "description", "inputSchema",
        "approve", "retryOnHostLoss"}``."""
        return {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.schema,
            "approve": self.approve,
            "retryOnHostLoss": self.retry_on_host_loss,
        }

    def run(self, arguments: Any) -> Tuple[Any, bool]:
        """Call the function with the agent's arguments; return ``(output, is_error)``.

        The output is the function's value when JSON can carry it (a ``str`` as it is). An
        exception becomes ``"ExceptionType: message"`` with ``is_error`` True (the traceback
        is logged on the host, never sent); so does a value JSON cannot carry, or one over
        1 MiB of JSON (``MAX_RESULT_BYTES``). Never raises
        an ``Exception`` (``KeyboardInterrupt`` and ``SystemExit`` go through).
        """
        if not isinstance(arguments, dict):
            return f"the arguments must be a JSON object, got {type(arguments).__name__}", True
        try:
            value = self.fn(**convert_arguments(self.fn, arguments))
        except Exception as exc:
            log.warning("host tool %s raised %s", self.name, type(exc).__name__, exc_info=True)
            return f"{type(exc).__name__}: {exc}", True
        try:
            size = len(json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8"))
        except (TypeError, ValueError, UnicodeEncodeError) as exc:
            log.warning("host tool %s returned a value JSON cannot carry: %s", self.name, exc)
            return f"the tool returned a {type(value).__name__}, which JSON cannot carry", True
        if size > MAX_RESULT_BYTES:
            log.warning("host tool %s returned %d bytes of JSON", self.name, size)
            return f"the tool's result is {size} bytes of JSON, over the limit of {MAX_RESULT_BYTES}", True
        return value, False


def host_tool(
    fn: Callable[..., Any],
    *,
    name: Optional[str] = None,
    description: Optional[str] = None,
    schema: Optional[Dict[str, Any]] = None,
    approve: bool = False,
    retry_on_host_loss: bool = False,
) -> HostTool:
    """Describe ``fn`` as a host tool.

    Args:
        fn: a synchronous function; the agent's arguments are its keyword arguments.
        name: default ``fn.__name__``.
        description: default the docstring's first paragraph (``""`` without one).
        schema: the arguments' JSON Schema (an ``object`` schema); default made from the
            signature and type hints, each parameter's text from the docstring's ``Args:``.
        approve: ask through the approval flow before each call.
        retry_on_host_loss: run the call again in a continuing host when the host that ran
            it was lost meanwhile (only for functions safe to run twice).

    Raises:
        BadHostTool: ``fn`` is not callable, the name is not 1 to 64 letters, digits, ``_``
            or ``-`` starting with a letter or ``_``, ``schema`` is not an object schema, or (without
            ``schema``) a parameter has no hint or a type JSON cannot carry.
    """
    if isinstance(fn, HostTool) or not callable(fn):
        raise BadHostTool(f"host_tool needs a function, got {type(fn).__name__}")
    tool_name = name if name is not None else getattr(fn, "__name__", "")
    if not isinstance(tool_name, str) or not _NAME.match(tool_name):
        raise BadHostTool(
            f"host tool name {tool_name!r} must be 1 to {MAX_TOOL_NAME} letters, digits, '_' or '-', "
            "starting with a letter or '_'"
        )
    if description is None:
        description = first_paragraph(getattr(fn, "__doc__", None))
    if not isinstance(description, str):
        raise BadHostTool(f"host tool {tool_name!r}: description must be a str")
    if schema is None:
        schema = function_schema(fn, tool_name)
    elif not isinstance(schema, dict) or schema.get("type") != "object":
        raise BadHostTool(f"host tool {tool_name!r}: schema must be a JSON Schema of type object")
    else:
        try:
            schema = json.loads(json.dumps(schema))
        except (TypeError, ValueError):
            raise BadHostTool(f"host tool {tool_name!r}: schema must be JSON") from None
    for flag, value in (("approve", approve), ("retry_on_host_loss", retry_on_host_loss)):
        if not isinstance(value, bool):
            raise BadHostTool(f"host tool {tool_name!r}: {flag} must be a bool")
    return HostTool(fn, tool_name, description, schema, approve, retry_on_host_loss)


def check_tools(tools: Iterable[Any]) -> Tuple[HostTool, ...]:
    """Check a session's tools: each a function (described by :func:`host_tool`) or a
    :class:`HostTool`; names unique.

    Raises:
        BadHostTool: a value that is neither, a bad tool (see :func:`host_tool`), or two
            tools of one name.
    """
    if isinstance(tools, (str, bytes)) or not hasattr(tools, "__iter__"):
        raise BadHostTool("tools must be a list of functions or HostTool values")
    out = []
    names: Dict[str, HostTool] = {}
    for item in tools:
        tool = item if isinstance(item, HostTool) else host_tool(item)
        if tool.name in names:
            raise BadHostTool(f"two host tools are named {tool.name!r}: give one another name")
        names[tool.name] = tool
        out.append(tool)
    return tuple(out)

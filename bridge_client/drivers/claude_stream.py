"""How the ``claude-code`` and ``qwen`` drivers map one run's stream-json messages onto parts
(see :mod:`bridge_client.drivers.claude_code` for what each message becomes).

Besides the mapping, :class:`StreamMapper` tells the user when the CLI's own permission
checks refused a tool while the session's approvals are off (a ``LocalSandbox`` without
``--approve``, where Claude Code's print mode refuses what would need asking): a ``data``
part ``<agent>-permission-refused`` (``{"message", "tool", "toolCallId", "setting"}``) names
the setting that refused it and says that approvals (``bridge-client run --approve ask|all``,
``CreateSessionOptions(approvals=True)``) hand such requests to the user.
"""
from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Protocol, Set

from ..bridge.driver import TurnContext
from .cli_process import Event, join_text, keep_session_id
from .cli_tools_once import CLITools

__all__ = ["StreamMapper", "StreamDriver"]


class StreamDriver(Protocol):
    """What :class:`StreamMapper` needs of its driver: the ``agent_id`` (the prefix of its
    ``data`` parts' names), the ``label`` (its name in messages) and the setting under which
    the CLI refuses, unasked, a tool that needs approval."""

    agent_id: str
    label: str

    def refusing_setting(self) -> str:
        """E.g. ``"permission_mode default"``."""

_RETRY_FIELDS = ("attempt", "max_retries", "retry_delay_ms", "error_status", "error")


# What the CLI's tool result says when its own permission checks refused the tool.
_REFUSED = re.compile(r"needs approval|requires approval|requested permissions|haven't granted", re.I)


class StreamMapper:
    """Maps one run's messages onto ``ctx``; keeps the open step's message id and tool names.

    Args:
        driver: the driver (its ``agent_id``, and ``refusing_setting()``: the setting that
            makes the CLI refuse tools, for the hint).
        ctx: the turn.
        tools: emits the tool calls and results (journaled, :mod:`.cli_tools_once`).
    """

    def __init__(self, driver: StreamDriver, ctx: TurnContext, tools: CLITools) -> None:
        self.driver = driver
        self.ctx = ctx
        self.tools = tools
        self.hinted: Set[str] = set()  # tool calls whose refusal was explained
        self.message_id: Optional[str] = None
        self.step_usage: Any = None
        self.step_tools = False
        self.names: Dict[str, str] = {}
        self.results: List[Dict[str, Any]] = []  # one per CLI turn (a queued message adds one)
        self.streamed = False  # the open step was opened by a message_start stream event

    def _session_id(self, sid: Any) -> None:
        keep_session_id(self.ctx, "session_id", sid)

    def _open(self, message_id: Optional[str]) -> None:
        if self.ctx.step is not None and message_id is not None and message_id == self.message_id:
            return
        self.close_step()
        self.ctx.start_step()
        self.message_id, self.step_usage, self.step_tools = message_id, None, False
        self.streamed = False

    def _stream_event(self, event: Any) -> None:
        # With --include-partial-messages: a model call starts a step, its text and thinking
        # stream as deltas (the whole blocks of the assistant messages are then skipped).
        kind = event.get("type") if isinstance(event, dict) else None
        if kind == "message_start":
            message = event.get("message")
            mid = message.get("id") if isinstance(message, dict) else None
            self._open(mid if isinstance(mid, str) else None)
            self.streamed = True
        elif kind == "content_block_delta" and self.streamed and self.ctx.step is not None:
            delta = event.get("delta") if isinstance(event.get("delta"), dict) else {}
            if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str) and delta["text"]:
                self.ctx.text(delta["text"])
            elif delta.get("type") == "thinking_delta" and isinstance(delta.get("thinking"), str):
                self.ctx.reasoning(delta["thinking"])

    def ensure_step(self) -> None:
        """Open a step when none is open (an approval is asked inside one)."""
        if self.ctx.step is None:
            self._open(None)

    def close_step(self) -> None:
        if self.ctx.step is not None:
            self.ctx.finish_step("tool-calls" if self.step_tools else "stop", self.step_usage)

    def on_event(self, event: Event) -> bool:
        """Map one line; return True for the ``result`` message (the run's last)."""
        ctx, msg = self.ctx, event.obj
        if msg is None:
            ctx.data(f"{self.driver.agent_id}-unparsed", {"line": event.line[:2000]})
            return False
        kind = msg.get("type")
        if kind == "system":
            if msg.get("subtype") == "init":
                self._session_id(msg.get("session_id"))
            elif msg.get("subtype") == "api_retry":
                # A refused key or a wrong base URL: the CLI retries for minutes (10 times,
                # backing off), printing nothing else; say so, as codex-error does for Codex.
                ctx.data(f"{self.driver.agent_id}-retry", {k: msg[k] for k in _RETRY_FIELDS if k in msg})
            return False
        if kind == "result":
            self._session_id(msg.get("session_id"))
            for denial in msg.get("permission_denials") or []:
                if isinstance(denial, dict) and denial.get("tool_use_id"):
                    self.refused(str(denial["tool_use_id"]), denial.get("tool_name"))
            self.close_step()
            self.results.append(msg)
            return True
        if kind == "stream_event":
            if not msg.get("parent_tool_use_id"):
                self._stream_event(msg.get("event"))
            return False
        message = msg.get("message")
        if kind not in ("assistant", "user") or not isinstance(message, dict):
            return False
        if msg.get("parent_tool_use_id"):
            if ctx.step is None:
                self._open(None)
            ctx.data(f"{self.driver.agent_id}-subagent", msg)
            return False
        content = message.get("content")
        if kind == "assistant":
            mid = message.get("id") if isinstance(message.get("id"), str) else None
            if not (self.streamed and ctx.step is not None):  # else: the streamed call's step
                self._open(mid)
            if message.get("usage") is not None:
                self.step_usage = message.get("usage")
            for block in content if isinstance(content, list) else []:
                self._assistant_block(block)
            return False
        # A user message: tool results for the open step (or a plain echo of input: skipped).
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                if ctx.step is None:
                    self._open(None)
                call_id = str(block.get("tool_use_id", ""))
                output, failed = join_text(block.get("content")), bool(block.get("is_error"))
                self.tools.result(call_id, self.names.get(call_id, "unknown"), output, failed)
                if failed and _REFUSED.search(output):
                    self.refused(call_id)
        return False

    def _assistant_block(self, block: Any) -> None:
        ctx = self.ctx
        kind = block.get("type") if isinstance(block, dict) else None
        if kind in ("text", "thinking") and self.streamed:
            return  # already streamed as deltas
        if kind == "text" and isinstance(block.get("text"), str):
            ctx.text(block["text"])
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            ctx.reasoning(block["thinking"])
        elif kind == "tool_use":
            call_id, name = str(block.get("id", "")), str(block.get("name", "unknown"))
            self.names[call_id] = name
            self.step_tools = True
            self.tools.call(call_id, name, block.get("input"))
        else:
            self.ctx.data(f"{self.driver.agent_id}-block", block)

    def refused(self, call_id: str, name: Any = None) -> None:
        """Explain, once per call, that the CLI's own checks refused the tool call
        ``call_id`` (nothing while approvals are on: then the CLI asked, or the user said)."""
        if self.ctx.approvals or call_id in self.hinted:
            return
        self.hinted.add(call_id)
        tool = str(name or self.names.get(call_id, "a tool"))
        setting = self.driver.refusing_setting()
        message = (
            f"{self.driver.label}'s own permission checks ({setting}) refused {tool}: with"
            " approvals on (bridge-client run --approve ask, or --approve all;"
            " CreateSessionOptions(approvals=True)) such requests are handed to you"
        )
        data = {"message": message, "tool": tool, "toolCallId": call_id, "setting": setting}
        self.ctx.data(f"{self.driver.agent_id}-permission-refused", data)

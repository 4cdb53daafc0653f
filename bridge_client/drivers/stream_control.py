"""The control side of a stream-json CLI run (Claude Code, Qwen Code): the CLI's permission
requests answered through the turn's approvals, and the user's messages written to its stdin
while the turn runs. Used by :mod:`bridge_client.drivers.claude_code`.

Where the protocol comes from: the control messages that Anthropic's Claude Agent SDK
exchanges with the CLI over stdio (``anthropics/claude-agent-sdk-python``,
``src/claude_agent_sdk/_internal/query.py``), checked against the schemas bundled in the
installed CLIs (``@anthropic-ai/claude-code`` 2.1.332, ``@qwen-code/qwen-code`` 0.24.4) and by
running them:

- the CLI asks ``{"type": "control_request", "request_id": ID, "request": {"subtype":
  "can_use_tool", "tool_name", "input", "tool_use_id", "permission_suggestions",
  "blocked_path", ...}}`` (Claude Code with ``--permission-prompt-tool stdio``; Qwen Code in
  its ``default`` approval mode once the host sent the ``initialize`` control request);
- the host answers ``{"type": "control_response", "response": {"subtype": "success",
  "request_id": ID, "response": {"behavior": "allow", "updatedInput": {...},
  "updatedPermissions": [...]}}}`` or ``{"behavior": "deny", "message": ..., "interrupt":
  bool}``; a request the host does not serve gets ``{"subtype": "error", "error": ...}``;
- a user message written to stdin while the CLI works (``{"type": "user", "message":
  {"role": "user", "content": TEXT}, "uuid": U}``) is queued by Claude Code, which reports it
  with ``{"type": "command_lifecycle", "command_uuid": U, "state": "queued" | "started" |
  "completed"}``: it is given to the model with the next tool result of the running turn, or,
  when the model had already finished, as the next turn of the same run (a second ``result``
  message then follows).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Callable, Dict, Optional, Set

from ..bridge.driver import TurnContext
from ..wire.parts import UserMessage
from .cli_process import JsonLinesProcess, summarize

__all__ = ["StreamControl", "approval_title", "initialize_request", "DENIED"]

DENIED = "The user denied this tool call."
"""The message a denial without the user's own words gives the model."""

MESSAGE_GRACE = 30.0
"""Seconds a run waits after a ``result`` for a user message it wrote to be taken by the CLI
(a CLI that never reports it then ends the run, rather than waiting for ever)."""

_TITLE_KEYS = ("command", "cmd", "file_path", "path", "notebook_path", "url", "pattern", "query",
               "description")


def approval_title(tool_name: str, tool_input: Any, limit: int = 120) -> str:
    """A one-line description of a tool call for an approval prompt: ``"Bash: rm -rf build"``
    (the tool's name and its command, path, URL or pattern, in that order of preference), or
    the name alone when the input has none of them. At most ``limit`` characters."""
    if isinstance(tool_input, dict):
        for key in _TITLE_KEYS:
            value = tool_input.get(key)
            if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
                value = " ".join(value)
            if isinstance(value, str) and value.strip():
                return summarize(f"{tool_name}: {value}", limit)
    return summarize(tool_name, limit)


def initialize_request() -> str:
    """The ``initialize`` control request line (no hooks), as the agent SDKs send first."""
    message = {
        "type": "control_request",
        "request_id": "bridge-initialize",
        "request": {"subtype": "initialize", "hooks": None},
    }
    return json.dumps(message) + "\n"


class StreamControl:
    """Answers one run's control requests and writes the turn's user messages to its stdin.

    Args:
        ctx: the turn.
        proc: the running CLI (stdin kept open).
        session_id: the CLI session the messages name (``"default"`` before the first).
        permission_updates: allow-always answers carry the CLI's ``permission_suggestions``
            as ``updatedPermissions`` (Claude Code's shape; their destination is made
            ``session``, so the CLI never writes the rule into the workspace's settings).
        messages: take the turn's user messages (``ctx.take_messages``) and write them.
        open_step: opens a step when none is open (an approval is asked inside a step).
        name: the driver's agent id (the ``data`` parts are ``<name>-message``).
    """

    def __init__(
        self,
        ctx: TurnContext,
        proc: JsonLinesProcess,
        *,
        session_id: Optional[str],
        permission_updates: bool,
        messages: bool,
        open_step: Callable[[], None],
        name: str = "claude-code",
    ) -> None:
        self.ctx = ctx
        self.proc = proc
        self.session_id = session_id or "default"
        self.permission_updates = permission_updates
        self.messages = messages
        self.open_step = open_step
        self.name = name
        self.pending: Set[str] = set()  # uuids of messages written and not yet taken
        self.ids: Dict[str, str] = {}  # uuid given to the CLI -> the bridge's message id
        self._waiting_since: Optional[float] = None

    # ------------------------------------------------------------------ control messages

    def handle(self, msg: Dict[str, Any]) -> bool:
        """Serve ``msg`` when it is a control message (a request of the CLI, the answer to
        one of ours, a message's lifecycle); return True then (the mapper skips it)."""
        kind = msg.get("type")
        if kind == "control_request":
            self._request(msg)
            return True
        if kind == "command_lifecycle":
            self._lifecycle(msg.get("command_uuid"), msg.get("state"))
            return True
        if kind in ("control_response", "control_cancel_request"):
            return True  # the answer to our interrupt or initialize; a withdrawn request
        if kind == "user" and msg.get("isReplay") and isinstance(msg.get("uuid"), str):
            self._taken(msg["uuid"])  # an echo of our message (--replay-user-messages)
        return False

    def _respond(self, request_id: Any, response: Dict[str, Any]) -> None:
        body = {"subtype": "success", "request_id": request_id, "response": response}
        self.proc.write(json.dumps({"type": "control_response", "response": body}) + "\n")

    def _request(self, msg: Dict[str, Any]) -> None:
        request_id = msg.get("request_id")
        raw = msg.get("request")
        request: Dict[str, Any] = raw if isinstance(raw, dict) else {}
        subtype = request.get("subtype")
        if subtype == "can_use_tool":
            self._respond(request_id, self._can_use_tool(request))
            return
        body = {"subtype": "error", "request_id": request_id,
                "error": f"the bridge does not serve {subtype!r} control requests"}
        self.proc.write(json.dumps({"type": "control_response", "response": body}) + "\n")

    def _can_use_tool(self, request: Dict[str, Any]) -> Dict[str, Any]:
        """Ask the turn's host about one tool call; the CLI's answer."""
        name = request.get("tool_name")
        name = name if isinstance(name, str) and name else "unknown"
        tool_input = request.get("input") if isinstance(request.get("input"), dict) else {}
        call_id = request.get("tool_use_id")
        call_id = call_id if isinstance(call_id, str) and call_id else f"{name}-{uuid.uuid4().hex[:8]}"
        if self.ctx.step is None:
            self.open_step()
        decision = self.ctx.ask_approval(call_id, name, tool_input, title=approval_title(name, tool_input))
        if decision.allowed:
            response: Dict[str, Any] = {"behavior": "allow", "updatedInput": tool_input}
            suggestions = request.get("permission_suggestions")
            always = decision.decision == "allow-always" and self.permission_updates
            if always and isinstance(suggestions, list):
                response["updatedPermissions"] = [
                    dict(s, destination="session") for s in suggestions if isinstance(s, dict)
                ]
            return response
        message = decision.message or DENIED
        return {"behavior": "deny", "message": message, "interrupt": decision.by == "cancel"}

    # ------------------------------------------------------------------ user messages

    def _lifecycle(self, message_uuid: Any, state: Any) -> None:
        """A message's progress in the CLI: ``queued`` (it has it), ``started`` (the model
        gets it), ``completed``; the first two are ``data`` parts ``<agent>-message``."""
        message_id = self.ids.get(message_uuid) if isinstance(message_uuid, str) else None
        if message_id is None:
            return
        if state in ("queued", "started"):
            self.ctx.data(f"{self.name}-message", {"messageId": message_id, "state": state})
        if state != "queued":
            self._taken(message_uuid)

    def _taken(self, message_uuid: str) -> None:
        self.pending.discard(message_uuid)
        if not self.pending:
            self._waiting_since = None

    def idle(self) -> bool:
        """Write the turn's new messages to stdin (the pump calls this between lines); True
        when a ``result`` came while a message was still queued and the CLI has not taken it
        within :data:`MESSAGE_GRACE` seconds (the run is then over)."""
        if self.messages:
            for message in self.ctx.take_messages():
                self._send(message)
        waiting = self._waiting_since
        return waiting is not None and time.monotonic() - waiting > MESSAGE_GRACE

    def _send(self, message: UserMessage) -> None:
        text = message.text
        message_uuid = str(uuid.uuid4())
        line = {
            "type": "user",
            "message": {"role": "user", "content": text},
            "parent_tool_use_id": None,
            "session_id": self.session_id,
            "uuid": message_uuid,
        }
        if self.proc.write(json.dumps(line) + "\n"):
            self.pending.add(message_uuid)
            self.ids[message_uuid] = message.message_id

    def finished_at_result(self) -> bool:
        """At a ``result`` message: True when the run is over (no message written that the CLI
        has not taken yet); else the run goes on to the turn the CLI starts for it."""
        if not self.pending:
            return True
        if self._waiting_since is None:
            self._waiting_since = time.monotonic()
        return False

"""How the ``acp`` driver turns an ACP agent's ``session/update`` notifications into parts.

The shapes are the Agent Client Protocol's (schema ``SessionUpdate``, protocol version 1):

- ``agent_message_chunk`` (a ``ContentBlock``): text → ``text-delta``; any other block (an
  image, a resource) → ``data`` ``acp-content``.
- ``agent_thought_chunk``: text → ``reasoning-delta``.
- ``tool_call`` and ``tool_call_update`` (``toolCallId``, ``title``, ``kind``, ``status``,
  ``rawInput``, ``content``, ``rawOutput``, ``locations``): one ``tool-call`` part per tool
  call, emitted once its input is known (the status leaves ``pending``, a permission is asked
  for it, or it ends), with ``toolName`` = its ``kind`` (``execute``, ``read``, ``edit``, ...,
  ``other``) and ``input`` = its ``rawInput`` (``{"title": ...}`` when the agent gives none);
  then one ``tool-result`` when its status becomes ``completed`` or ``failed`` (an error):
  ``output`` is the text of its ``content`` blocks, or the blocks themselves when they are not
  all text (a diff), or its ``rawOutput``. Agents send ``tool_call`` again for a call they
  already announced (with the input filled in): it counts as an update.
- ``plan`` → ``data`` ``acp-plan`` (the entries); ``current_mode_update`` → ``data``
  ``acp-mode``; ``user_message_chunk`` (the prompt echoed) and ``available_commands_update``
  are skipped; any other update → ``data`` ``acp-update`` (the update itself).

Steps: ACP does not mark model calls, so a step is what one model call gives: its text and
reasoning and the tool calls it asks for. A step opens at the first update of a turn, and a
new one opens when model output (text, reasoning, a new tool call) comes after every tool
call of the open step has ended.
"""
from __future__ import annotations

import threading
import uuid
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..bridge.driver import TurnContext
from .acp_journal import recap
from .stream_control import approval_title

__all__ = [
    "UpdateMapper", "tool_output", "ask_permission", "policy_permission", "taken_messages", "stop_reason",
    "prompt_end",
]

_STOP_REASONS = {
    "end_turn": ("stop", "stop"),
    "max_tokens": ("stop", "max-tokens"),
    "max_turn_requests": ("max-steps", "max-steps"),
    "cancelled": ("cancelled", "cancelled"),
    "refusal": ("error", "refusal"),
}
"""ACP ``stopReason`` → (the turn's finish reason, the last step's finish reason)."""


def stop_reason(result: Any) -> Any:
    """The ``stopReason`` of a ``session/prompt`` answer (``None`` when it has none)."""
    return result.get("stopReason") if isinstance(result, dict) else None


def prompt_end(result: Any) -> Tuple[str, str, Optional[Dict[str, Any]], Optional[str]]:
    """How a ``session/prompt`` answer ends the turn: ``(the turn's finish reason, the last
    step's, the answer's usage or None, the error message or None)``."""
    stop = stop_reason(result)
    turn_reason, step_reason = _STOP_REASONS.get(str(stop), ("stop", str(stop or "stop")))
    usage = result.get("usage") if isinstance(result, dict) else None
    usage = usage if isinstance(usage, dict) else None
    error = f"the ACP agent stopped the turn: stopReason {stop}" if turn_reason == "error" else None
    return turn_reason, step_reason, usage, error

_ENDED = ("completed", "failed")
_STARTED = ("in_progress",) + _ENDED


def tool_output(content: Any, raw_output: Any) -> Any:
    """A tool result's ``output``: the text of ``content``'s text blocks joined by newlines;
    the blocks themselves when one is not text (a diff, a terminal); else ``raw_output``
    (``""`` when there is none)."""
    if isinstance(content, list) and content:
        texts: List[str] = []
        for item in content:
            block = item.get("content") if isinstance(item, dict) and item.get("type") == "content" else None
            if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            else:
                return content
        return "\n".join(texts)
    return "" if raw_output is None else raw_output


class _Tool:
    """What the driver knows of one tool call so far."""

    __slots__ = ("id", "fields", "called", "ended")

    def __init__(self, tool_call_id: str) -> None:
        self.id = tool_call_id
        self.fields: Dict[str, Any] = {}
        self.called = False  # its tool-call part is out
        self.ended = False  # its tool-result part is out


class UpdateMapper:
    """Maps one prompt's ``session/update`` notifications onto a turn (see the module).

    Args:
        ctx: the turn.
    """

    def __init__(self, ctx: TurnContext, journal: Any = None) -> None:
        self.ctx = ctx
        self.journal = journal  # a ToolJournal (acp_journal), or None
        self.tools: Dict[str, _Tool] = {}
        self._step_tools: List[_Tool] = []
        self._step_lock = threading.RLock()

    def given_back(
        self, prompt: str, calls: Sequence[Dict[str, Any]], interrupted: Sequence[Dict[str, Any]]
    ) -> str:
        """Give back what an earlier run of the turn journaled in the step a restart cut:
        each completed call's ``tool-call`` and ``tool-result`` again, once, in the open (or
        a new) step, and a ``data`` part ``acp-tool-interrupted`` for each call without a
        result. Returns ``prompt`` followed by the recap the agent gets of them
        (:func:`~bridge_client.drivers.acp_journal.recap`)."""
        for call in interrupted:
            self.ctx.data("acp-tool-interrupted", {k: call.get(k) for k in ("id", "name", "input")})
        for call in calls:
            self.ensure_step()
            tool = self.tools[str(call["id"])] = _Tool(str(call["id"]))
            tool.called = tool.ended = True
            self._step_tools.append(tool)
            name = str(call.get("name") or "other")
            self.ctx.tool_call(tool.id, name, call.get("input"))
            self.ctx.tool_result(tool.id, name, call.get("output"), is_error=bool(call.get("is_error")))
        return f"{prompt}\n\n{recap(list(calls), list(interrupted))}"

    # ------------------------------------------------------------------ steps

    def _model_output(self) -> None:
        """Open a step for model output: the first, or the next once the open step's tool
        calls have all ended."""
        ctx = self.ctx
        with self._step_lock:
            if ctx.step is not None and self._step_tools and all(t.ended for t in self._step_tools):
                ctx.finish_step("tool-calls")
            if ctx.step is None:
                ctx.start_step()
                self._step_tools = []

    def ensure_step(self) -> None:
        """Open a step when none is open (a permission is asked inside one, a host tool is
        called inside one: from the host relay's thread, hence the lock)."""
        with self._step_lock:
            if self.ctx.step is None:
                self._model_output()

    def close(self, finish_reason: str, note: str = "the turn ended before the tool call did") -> None:
        """End the open step (if any) with ``finish_reason``; a tool call still open gets an
        error result saying ``note``, so every ``tool-call`` has its ``tool-result``."""
        ctx = self.ctx
        if ctx.step is None:
            return
        for tool in self._step_tools:
            if not tool.ended:
                self._call(tool)
                tool.ended = True
                ctx.tool_result(tool.id, self._name(tool), note, is_error=True)
        ctx.finish_step(finish_reason)

    # ------------------------------------------------------------------ tool calls

    @staticmethod
    def _name(tool: _Tool) -> str:
        kind = tool.fields.get("kind")
        return kind if isinstance(kind, str) and kind else "other"

    @staticmethod
    def input_of(tool: _Tool) -> Any:
        """The call's ``input`` as its ``tool-call`` part shows it."""
        raw = tool.fields.get("rawInput")
        title = tool.fields.get("title")
        empty = raw is None or raw == {}
        return {"title": title} if empty and isinstance(title, str) else ({} if raw is None else raw)

    def _call(self, tool: _Tool) -> None:
        if tool.called:
            return
        self.ctx.tool_call(tool.id, self._name(tool), self.input_of(tool))
        tool.called = True
        if self.journal is not None:
            self.journal.started(tool.id, self._name(tool), self.input_of(tool))

    def tool(self, fields: Dict[str, Any]) -> Optional[_Tool]:
        """Merge a ``tool_call``/``tool_call_update`` (or a permission request's
        ``toolCall``) into the call it names; emit what became known. Returns the call
        (``None`` without a ``toolCallId``)."""
        tool_call_id = fields.get("toolCallId")
        if not isinstance(tool_call_id, str) or not tool_call_id:
            return None
        tool = self.tools.get(tool_call_id)
        if tool is None:  # a call not seen before is model output, whatever announced it
            self._model_output()
            tool = self.tools[tool_call_id] = _Tool(tool_call_id)
            self._step_tools.append(tool)
        for key, value in fields.items():
            if key not in ("sessionUpdate", "toolCallId", "_meta") and value is not None:
                tool.fields[key] = value
        status = tool.fields.get("status")
        if status in _STARTED:
            self._call(tool)
        if status in _ENDED and not tool.ended:
            tool.ended = True
            output = tool_output(tool.fields.get("content"), tool.fields.get("rawOutput"))
            if self.journal is not None:  # before the part: a logged result is journaled
                self.journal.completed(
                    tool.id, self._name(tool), self.input_of(tool), output, status == "failed"
                )
            self.ctx.tool_result(tool.id, self._name(tool), output, is_error=status == "failed")
        return tool

    def asked(self, tool_fields: Any) -> Optional[_Tool]:
        """A permission request names this tool call: its input is known, emit the call."""
        if not isinstance(tool_fields, dict):
            return None
        tool = self.tool(tool_fields)
        if tool is not None:
            self._call(tool)
        return tool

    # ------------------------------------------------------------------ updates

    def update(self, update: Any) -> None:
        """Map one ``update`` object of a ``session/update`` notification."""
        if not isinstance(update, dict):
            return
        kind = update.get("sessionUpdate")
        ctx = self.ctx
        if kind in ("agent_message_chunk", "agent_thought_chunk"):
            block = update.get("content")
            if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
                if not block["text"]:
                    return  # agents open a message with an empty chunk
                self._model_output()
                (ctx.text if kind == "agent_message_chunk" else ctx.reasoning)(block["text"])
            elif block is not None:
                self._model_output()
                ctx.data("acp-content", block)
        elif kind in ("tool_call", "tool_call_update"):
            self.tool(update)
        elif kind == "plan":
            ctx.data("acp-plan", update.get("entries"))
        elif kind == "current_mode_update":
            ctx.data("acp-mode", update.get("currentModeId"))
        elif kind in ("user_message_chunk", "available_commands_update"):
            return
        else:
            ctx.data("acp-update", update)


_CHOICES = {
    "allow_once": "allow-once",
    "allow_always": "allow-always",
    "reject_once": "deny",
    "reject_always": "deny",
}
"""ACP's ``PermissionOptionKind`` → the bridge's approval choice."""

_KINDS = {"allow-once": ("allow_once",), "allow-always": ("allow_always", "allow_once"),
          "deny": ("reject_once", "reject_always")}
"""The bridge's decision → the option kinds that carry it, preferred first (a remembered
allow-always may answer an agent that offers only ``allow_once``; an allow-once is never
widened to ``allow_always``)."""


def ask_permission(
    ctx: TurnContext, mapper: UpdateMapper, tool: Optional[_Tool], options: Sequence[Dict[str, Any]]
) -> Dict[str, Any]:
    """Answer a ``session/request_permission`` by asking the turn's host
    (``ctx.ask_approval``): the outcome object (``selected`` with the chosen option's id, or
    ``cancelled`` when the turn was cancelled or no offered option carries the decision)."""
    choices: List[str] = []
    for option in options:
        choice = _CHOICES.get(str(option.get("kind")))
        if choice is not None and choice not in choices:
            choices.append(choice)
    if not choices or ctx.cancelled.is_set():
        return {"outcome": "cancelled"}
    mapper.ensure_step()
    if tool is not None:
        call_id, name, value = tool.id, UpdateMapper._name(tool), UpdateMapper.input_of(tool)
        title = tool.fields.get("title")
    else:
        call_id, name, value, title = f"acp-{uuid.uuid4().hex[:12]}", "other", {}, None
    if not isinstance(title, str) or not title:
        title = approval_title(name, value)
    decision = ctx.ask_approval(call_id, name, value, choices=tuple(choices), title=title)
    if decision.by == "cancel":
        return {"outcome": "cancelled"}
    for kind in _KINDS.get(decision.decision, ()):
        chosen = next((o for o in options if o.get("kind") == kind), None)
        if chosen is not None:
            return {"outcome": "selected", "optionId": chosen.get("optionId")}
    return {"outcome": "cancelled"}


_PREFERRED = {"reject": ("reject_once", "reject_always"), "allow": ("allow_once", "allow_always"),
              "allow_always": ("allow_always", "allow_once")}
"""The ``permission`` policy → the option kinds it picks, preferred first."""


def policy_permission(ctx: TurnContext, tool: Optional[_Tool], options: Sequence[Dict[str, Any]],
                      permission: str) -> Dict[str, Any]:
    """Answer a ``session/request_permission`` by the driver's ``permission`` policy
    (``reject``, ``allow``, ``allow_always``) and say so in a ``data`` part
    ``acp-permission``: the outcome object (``cancelled`` when the turn was cancelled or no
    offered option fits)."""
    outcome: Dict[str, Any] = {"outcome": "cancelled"}
    if not ctx.cancelled.is_set():
        for kind in _PREFERRED[permission]:
            chosen = next((o for o in options if o.get("kind") == kind), None)
            if chosen is not None:
                outcome = {"outcome": "selected", "optionId": chosen.get("optionId")}
                break
    ctx.data(
        "acp-permission",
        {
            "toolCallId": tool.id if tool is not None else None,
            "title": tool.fields.get("title") if tool is not None else None,
            "options": [{"optionId": o.get("optionId"), "kind": o.get("kind")} for o in options],
            "policy": permission,
            "outcome": outcome,
        },
    )
    return outcome


def taken_messages(ctx: TurnContext) -> List[str]:
    """The texts of the user messages sent to the running turn and not taken yet."""
    return [m.text for m in ctx.take_messages() if m.text]

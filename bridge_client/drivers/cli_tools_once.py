"""The tool calls of an agent CLI's turn, journaled so a turn continued after a bridge death
does not run again a call whose result is in the log: what the ``claude-code``, ``qwen``,
``codex``, ``gemini`` and ``pi`` drivers share.

The mechanism is the ``acp`` driver's (:mod:`bridge_client.drivers.acp_journal`): each tool
call of the running turn is written to a small file of the bridge's state directory
(``cli-tools/<hash of the session id>.json``; 0600, replaced atomically and synced) when the
CLI announces it, and again with its output *before* its ``tool-result`` part is emitted. A
restart resets the turn to its last completed step, and the CLI, started again, would ask the
model again from before the cut step's tool call. So a later run of the same turn
(:func:`resume_turn`) reads the journal:

- a call with a result that is not in a completed step is given back: its ``tool-call`` and
  ``tool-result`` parts are emitted again, once, in a step of their own (finish reason
  ``tool-calls``), and the prompt tells the agent that it ran and what it printed, so the
  agent goes on from its result;
- a call without a result (the bridge died while it ran; the keeper killed the CLI and the
  tool with it, :mod:`bridge_client.drivers.keeper`) is named in a ``data`` part
  ``<agent>-tool-interrupted`` (``{"id", "name", "input"}``) and in the prompt: it may have
  finished or not, and the agent is told to check before it runs it again. With approvals
  on, running it again asks the user anew.

The prompt also recaps the tool calls of the turn's completed steps (with their outputs), also
when the run resumes the CLI session that holds them: a CLI may not have written the result of
its last completed step to its session before the bridge died.
"""
from __future__ import annotations

import hashlib
import os
from typing import Any, Dict, List, Optional, Tuple

from ..bridge.driver import TurnContext
from ..wire.parts import ToolCall, ToolResult
from .acp_journal import ToolJournal, recap
from .cli_process import resume_point

__all__ = ["CLITools", "resume_turn"]


class CLITools:
    """Emits the tool calls of one run of a turn, journaling each first (see the module).

    Args:
        ctx: the turn.
        agent_id: the driver's name, for the ``<agent>-tool-interrupted`` part.
        journal: the turn's journal (default: the session's file in the state directory).
    """

    def __init__(self, ctx: TurnContext, agent_id: str, journal: Optional[ToolJournal] = None) -> None:
        self.ctx = ctx
        self.agent_id = agent_id
        self.journal = journal if journal is not None else _journal(ctx)

    def call(self, call_id: str, name: str, input: Any) -> None:
        """Journal, then emit, the ``tool-call`` ``call_id`` (tool ``name``, JSON ``input``)."""
        self.journal.started(call_id, name, input)
        self.ctx.tool_call(call_id, name, input)

    def result(self, call_id: str, name: str, output: Any, is_error: bool = False) -> None:
        """Journal (synced), then emit, the ``tool-result`` of ``call_id``."""
        self.journal.completed(call_id, name, _input(self.journal, call_id), output, is_error)
        self.ctx.tool_result(call_id, name, output, is_error)

    def finished(self) -> None:
        """The run ended normally. The journal stays: until the turn's end is committed, a
        bridge death runs the turn's last steps again, which need it. The next turn of the
        session replaces it (a journal of another turn is never read)."""


def _input(journal: ToolJournal, call_id: str) -> Any:
    for entry in journal.calls:
        if entry.get("id") == call_id:
            return entry.get("input")
    return None


def _journal(ctx: TurnContext) -> ToolJournal:
    from . import STATE_DIR  # the bridge's state directory, set before drivers are made

    if not STATE_DIR:
        return ToolJournal(None, ctx.turn_id)
    name = hashlib.sha256(ctx.session_id.encode("utf-8")).hexdigest()[:32]
    return ToolJournal(os.path.join(STATE_DIR, "cli-tools", f"{name}.json"), ctx.turn_id)


def _logged(ctx: TurnContext) -> Dict[str, Dict[str, Any]]:
    """The tool calls of the turn's completed steps, by id (with their results)."""
    calls: Dict[str, Dict[str, Any]] = {}
    for step in ctx.steps:
        for part in step:
            if isinstance(part, ToolCall):
                call = {"id": part.tool_call_id, "name": part.tool_name, "input": part.input}
                calls[part.tool_call_id] = call
            elif isinstance(part, ToolResult) and part.tool_call_id in calls:
                calls[part.tool_call_id].update(output=part.output, is_error=part.is_error)
    return calls


def resume_turn(
    ctx: TurnContext, key: str, continue_prompt: str, agent_id: str
) -> Tuple[Optional[str], str, CLITools]:
    """Where a run of the turn starts: the CLI session to resume (the session state's
    ``key``), the prompt, and the :class:`CLITools` that emits its tool calls.

    A first run gets :func:`~bridge_client.drivers.cli_process.resume_point`'s answer. A run
    after a restart also gives back what the journal holds of the cut step (see the module's
    docstring): the completed calls' parts are emitted here, in a step of their own, and the
    prompt ends with a recap of them and of the interrupted ones.
    """
    session_id, prompt = resume_point(ctx, key, continue_prompt)
    tools = CLITools(ctx, agent_id)
    logged = _logged(ctx)
    done, interrupted = tools.journal.cut(list(logged))
    for call in interrupted:
        ctx.data(f"{agent_id}-tool-interrupted", {k: call.get(k) for k in ("id", "name", "input")})
    if done:
        ctx.start_step()
        for call in done:
            name = str(call.get("name") or "unknown")
            ctx.tool_call(str(call["id"]), name, call.get("input"))
            ctx.tool_result(str(call["id"]), name, call.get("output"), bool(call.get("is_error")))
        ctx.finish_step("tool-calls")
    # Told even when the CLI session is resumed: a CLI may not have written a result of a
    # completed step to its session yet when its bridge died (Claude Code then resumes with
    # the call marked "interrupted, outcome unknown"), and would run the call again.
    told: List[Dict[str, Any]] = [c for c in logged.values() if "output" in c]
    text = recap(told + done, interrupted)
    if text:
        prompt = f"{prompt}\n\n{text}"
    return session_id, prompt, tools

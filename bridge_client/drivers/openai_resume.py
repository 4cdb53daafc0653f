"""The ``openai`` driver's step journal: a step cut by a bridge death after the model's
answer is run again without asking the model again, and its tool calls are not run twice.

A restart runs the cut step again. Asking the model again would make it call its tools
again, and a command of the cut step may have run already (or still run: it outlives the bridge
under its keeper, :class:`~bridge_client.drivers.keeper.KeptCommand`). So once a step's answer
is complete, and before its first tool runs, the driver writes the answer (the assistant
message with its tool calls, the finish reason, the usage) to a journal in the bridge's state
directory (``openai-steps/<hash of the session id>.json``, the file format of
:class:`~bridge_client.drivers.acp_journal.ToolJournal`: mode 0600, replaced atomically and
synced), and each tool's result before its ``tool-result`` part is emitted. A later run of
the same turn that opens that step again replays it: the assistant's text and tool calls are
emitted again, a call whose result is journaled gets that result, a ``run_command`` an
earlier bridge started gets the result of that run (waited for while it still runs, or
*interrupted* when its keeper is gone too), and only a call that never started runs (asking
for approval again when approvals are on). The model is then asked again from after the tool
results.
"""
from __future__ import annotations

import hashlib
import os
from typing import Any, Dict, Optional, Tuple

from ..bridge.driver import TurnContext
from .acp_journal import ToolJournal

__all__ = ["step_journal", "replayed_step", "note_step", "earlier_result"]

_STEP = "step:"
"""The id prefix of a step's entry in the journal (tool-call ids are the model's own)."""


def step_journal(ctx: TurnContext) -> ToolJournal:
    """The journal of ``ctx``'s session and turn (off, ``path`` ``None``, outside a bridge)."""
    from . import STATE_DIR  # the bridge's state directory, set before drivers are made

    if not STATE_DIR:
        return ToolJournal(None, ctx.turn_id)
    name = hashlib.sha256(ctx.session_id.encode("utf-8")).hexdigest()[:32]
    return ToolJournal(os.path.join(STATE_DIR, "openai-steps", f"{name}.json"), ctx.turn_id)


def note_step(journal: ToolJournal, step: int, assistant: Dict[str, Any], finish: str, usage: Any) -> None:
    """Journal step ``step``'s complete answer (written and synced before its tools run);
    the entries of earlier steps are dropped (those steps are complete in the log)."""
    journal.calls = []
    journal.started(f"{_STEP}{step}", "assistant", {"message": assistant, "finish": finish, "usage": usage})


def replayed_step(journal: ToolJournal, step: int) -> Optional[Tuple[Dict[str, Any], str, Any]]:
    """The answer an earlier run of this turn journaled for step ``step``, as
    ``(assistant message, finish reason, usage)``, or ``None`` (the model must be asked)."""
    for entry in journal.earlier:
        if entry.get("id") == f"{_STEP}{step}":
            value = entry.get("input")
            if isinstance(value, dict) and isinstance(value.get("message"), dict):
                return value["message"], str(value.get("finish") or "tool_calls"), value.get("usage")
    return None


def earlier_result(journal: ToolJournal, call_id: str) -> Optional[Tuple[Any, bool]]:
    """The result an earlier run of this turn journaled for the tool call ``call_id``
    (``(output, is_error)``), or ``None``."""
    for entry in journal.earlier:
        if entry.get("id") == call_id and "output" in entry:
            return entry["output"], bool(entry.get("is_error"))
    return None

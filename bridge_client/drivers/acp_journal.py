"""The ``acp`` driver's journal of a turn's tool calls, so a turn continued after a bridge
death does not run again a tool call whose result is in the log.

A restart resets the turn to its last completed step: a tool call that completed in the cut
step (its ``tool-result`` was logged) is lost with it, and an agent asked again from before
the step would run the tool again. So the driver writes each tool call of the running turn
to a small file of the bridge's state directory (``acp-tools/<hash of the session
id>.json``; mode 0600, replaced atomically and synced) *before* its ``tool-result`` part is
emitted. A later run of the same turn reads it: the calls that completed in the cut step are
given back (their parts are emitted again, once, in the retried step, and the prompt tells
the agent their results), and a call that started but has no result is named in a ``data``
part ``acp-tool-interrupted`` and in the prompt (it may have finished or not: the agent is
told to check before it runs it again).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from typing import Any, Dict, List, Optional

__all__ = ["ToolJournal", "completed_calls", "recap"]

log = logging.getLogger("bridge_client.drivers.acp")

class ToolJournal:
    """The tool calls of one session's running turn (see the module's docstring).

    Args:
        path: the journal's file (``None``: no state directory, the journal is off).
        turn_id: the running turn.
    """

    def __init__(self, path: Optional[str], turn_id: str) -> None:
        self.path = path
        self.turn_id = turn_id
        self.calls: List[Dict[str, Any]] = []
        self.earlier: List[Dict[str, Any]] = []  # what an earlier run of this turn journaled
        if path is not None:
            try:
                with open(path, encoding="utf-8") as f:
                    data = json.load(f)
                if isinstance(data, dict) and data.get("turn") == turn_id:
                    self.earlier = [c for c in data.get("calls") or [] if isinstance(c, dict)]
            except (OSError, ValueError):
                pass
        self.calls = [dict(c) for c in self.earlier]

    @classmethod
    def for_session(cls, session_id: str, turn_id: str) -> "ToolJournal":
        """The journal of ``session_id``'s turn ``turn_id`` (see the module's docstring)."""
        from . import STATE_DIR  # the bridge's state directory, set before drivers are made

        if not STATE_DIR:
            return cls(None, turn_id)
        name = hashlib.sha256(session_id.encode("utf-8")).hexdigest()[:32]
        return cls(os.path.join(STATE_DIR, "acp-tools", f"{name}.json"), turn_id)

    def discard(self) -> None:
        """Remove the journal's file (the session was closed); a missing file is fine."""
        if self.path is not None:
            try:
                os.unlink(self.path)
            except OSError:
                pass

    def _write(self) -> None:
        if self.path is None:
            return
        try:
            folder = os.path.dirname(self.path)
            os.makedirs(folder, mode=0o700, exist_ok=True)  # mkstemp makes the file 0600
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".journal-")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({"turn": self.turn_id, "calls": self.calls}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError as exc:
            log.warning("cannot write the ACP tool journal %s: %s", self.path, exc)

    def _entry(self, call_id: str) -> Dict[str, Any]:
        for entry in self.calls:
            if entry.get("id") == call_id:
                return entry
        entry = {"id": call_id}
        self.calls.append(entry)
        return entry

    def started(self, call_id: str, name: str, value: Any) -> None:
        """The call ``call_id`` (tool ``name``, JSON ``value``) was announced with its input."""
        entry = self._entry(call_id)
        if "output" not in entry:
            entry.update(name=name, input=value)
            self._write()

    def completed(self, call_id: str, name: str, value: Any, output: Any, is_error: bool) -> None:
        """The call ended with ``output``: written (synced) before its result part is emitted."""
        entry = self._entry(call_id)
        entry.update(name=name, input=value, output=output, is_error=is_error)
        self._write()

    def cut(self, logged: List[str]) -> "tuple[List[Dict[str, Any]], List[Dict[str, Any]]]":
        """The calls of an earlier run that are not in a completed step (``logged``: the
        tool-call ids of the completed steps): (those with a result, those without)."""
        rest = [c for c in self.earlier if c.get("id") not in logged]
        return [c for c in rest if "output" in c], [c for c in rest if "output" not in c]


def recap(done: List[Dict[str, Any]], interrupted: List[Dict[str, Any]]) -> str:
    """The text that tells a continued agent which tool calls already ran (empty: none)."""
    lines: List[str] = []
    if done:
        lines.append(
            "These tool calls already ran to the end before the interruption; do not run them again:"
        )
        for c in done:
            output = c.get("output")
            shown = output if isinstance(output, str) else json.dumps(output)
            status = "failed" if c.get("is_error") else "completed"
            lines.append(f"- {c.get('name')} {json.dumps(c.get('input'))}: {status}, output: {shown}")
    if interrupted:
        lines.append(
            "These tool calls were running when the interruption came; they may have finished or"
            " not: check their effects before you run them again:"
        )
        for c in interrupted:
            lines.append(f"- {c.get('name')} {json.dumps(c.get('input'))}")
    return "\n".join(lines)


def completed_calls(steps: Any) -> List[Dict[str, Any]]:
    """The tool calls of a turn's completed ``steps`` (lists of parts) that have a result:
    ``{"id", "name", "input", "output", "is_error"}``, in order. A continued agent is told of
    them even when it loaded its session: an agent may not have stored the result of its last
    completed step before the bridge died (GitHub Copilot, Claude Code then mark the call
    "interrupted, outcome unknown" and may run it again)."""
    from ..wire.parts import ToolCall, ToolResult

    calls: Dict[str, Dict[str, Any]] = {}
    for step in steps:
        for part in step:
            if isinstance(part, ToolCall):
                call = {"id": part.tool_call_id, "name": part.tool_name, "input": part.input}
                calls[part.tool_call_id] = call
            elif isinstance(part, ToolResult) and part.tool_call_id in calls:
                calls[part.tool_call_id].update(output=part.output, is_error=part.is_error)
    return [c for c in calls.values() if "output" in c]

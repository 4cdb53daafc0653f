"""How a request, an answer and a user message show in one line (the ``run`` output and the
``--approve ask`` question), and what a typed answer at that question means. See the
*Interactive turns* guide (``interactive``).
"""
from __future__ import annotations

import json
import unicodedata
from typing import Any, Optional, Sequence

from ..terminal import Colours
from ..wire.parts import ApprovalAnswer, ApprovalRequest, Part, UserMessage

__all__ = ["shorten", "what", "keys", "question", "parse_answer", "describe"]

# What a question shows of a request: one line, at most this many characters.
_SHOWN = 160


def shorten(text: str, limit: int = _SHOWN) -> str:
    """``text`` as one line of at most ``limit`` characters that cannot hide anything.

    Control characters (a carriage return that would overwrite what the line shows, escape
    sequences that colour it or move the cursor, newlines) are shown escaped, as ``\\r``,
    ``\\x1b``; other format characters (bidirectional overrides) as ``\\u202e``. A longer text
    keeps its start and ends with ``...`` and the count of characters left out.
    """
    out = []
    for ch in text:
        if ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") or ch == "\\":
            out.append("\\\\" if ch == "\\" else ch.encode("unicode_escape").decode("ascii"))
        else:
            out.append(ch)
    line = "".join(out)
    if len(line) <= limit:
        return line
    keep = max(limit - 20, 10)
    return f"{line[:keep]}... ({len(line) - keep} more)"


def _input_text(value: Any) -> str:
    """What a tool's input shows: its ``command`` (or sole string field), else its JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        for key in ("command", "cmd", "file_path", "path", "url"):
            if isinstance(value.get(key), str):
                return str(value[key])
        strings = [v for v in value.values() if isinstance(v, str)]
        if len(value) == 1 and strings:
            return strings[0]
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def what(request: ApprovalRequest, limit: int = _SHOWN) -> str:
    """What the agent wants, in one line: its ``title`` when it gives one, else the tool's
    name and input (``Bash: rm -rf build``), shortened and escaped (see :func:`shorten`)."""
    if request.title:
        return shorten(request.title, limit)
    return shorten(f"{request.tool_name}: {_input_text(request.input)}", limit)


def keys(choices: Sequence[str]) -> str:
    """``[y]es/[n]o/[a]lways`` for the choices the agent offers (no is always possible)."""
    keys = []
    if "allow-once" in choices or not choices:
        keys.append("[y]es")
    keys.append("[n]o")
    if "allow-always" in choices:
        keys.append("[a]lways")
    return "/".join(keys)


def question(request: ApprovalRequest) -> str:
    """The question of the terminal prompt: ``Allow Bash: rm -rf build? [y]es/[n]o/[a]lways``."""
    return f"Allow {what(request)}? {keys(request.choices)} "


_ANSWERS = {
    "y": "allow-once", "yes": "allow-once",
    "n": "deny", "no": "deny",
    "a": "allow-always", "always": "allow-always",
}


def parse_answer(line: str, choices: Sequence[str]) -> Optional[str]:
    """The decision a typed line means (``allow-once``, ``allow-always``, ``deny``), or
    ``None`` for a line to ask again about: unknown words, and a choice the agent does not
    offer (``a`` when it offers no allow-always)."""
    decision = _ANSWERS.get(line.strip().lower())
    if decision is None or decision == "deny":
        return decision
    if choices and decision not in choices:
        return None
    return decision


_DECIDED = {"allow-once": "allowed", "allow-always": "allowed always", "deny": "denied"}


def describe(part: Part, c: Colours) -> Optional[str]:
    """The human line for a request, an answer or a user message; ``None`` for other parts.

    ``[approval] Bash: rm -rf build (request ID)``, ``[denied] ID by host: not now``,
    ``[message] also run the tests``.
    """
    if isinstance(part, ApprovalRequest):
        return f"{c.note('[approval]')} {what(part)} (request {part.request_id})"
    if isinstance(part, ApprovalAnswer):
        word = _DECIDED.get(part.decision, part.decision)
        paint = c.bad if part.decision == "deny" else c.ok
        note = f": {shorten(part.message)}" if part.message else ""
        return f"{paint(f'[{word}]')} {part.request_id} by {part.by}{note}"
    if isinstance(part, UserMessage):
        return f"{c.note('[message]')} {shorten(part.text, 500)}"
    return None


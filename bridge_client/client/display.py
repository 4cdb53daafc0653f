"""How a :class:`~bridge_client.client.turn.Turn` shows itself in IPython and Jupyter.

``Turn._repr_pretty_`` (IPython's plain text) and ``Turn._repr_html_`` (notebooks) call these.
Both show what was *yielded* so far: the turn id, whether it finished (and how), the complete
steps read, and the text of its text deltas (reset attempts removed). Showing a turn never
reads from the bridge.
"""
from __future__ import annotations

import html
from typing import Any

__all__ = ["status_line", "turn_text", "turn_html", "MAX_SHOWN"]

MAX_SHOWN = 20_000
"""Characters of text shown at most; a longer text is shown by its tail."""


def status_line(turn: Any) -> str:
    """``"turn <id>: finished (stop), 2 steps"`` or ``"turn <id>: not finished, 1 step read"``."""
    steps = f"{turn.steps} step{'s' if turn.steps != 1 else ''}"
    finish = turn.finish
    if finish is not None:
        reason = finish.finish_reason + (f": {finish.error}" if finish.error else "")
        return f"turn {turn.id}: finished ({reason}), {steps}"
    return f"turn {turn.id}: not finished, {steps} read"


def _shown_text(turn: Any) -> str:
    text: str = turn.text()
    if len(text) > MAX_SHOWN:
        return "…" + text[-MAX_SHOWN:]
    return text


def turn_text(turn: Any) -> str:
    """The plain-text view: the status line, then the text so far."""
    text = _shown_text(turn)
    return status_line(turn) + ("\n" + text if text else "")


def turn_html(turn: Any) -> str:
    """The HTML view: a status line and the text so far in a ``<pre>``, all HTML-escaped."""
    finish = turn.finish
    colour = "#888" if finish is None else ("#2a7" if finish.finish_reason == "stop" else "#c44")
    text = _shown_text(turn)
    body = f"<pre style='white-space:pre-wrap;margin:0.3em 0 0 0'>{html.escape(text)}</pre>" if text else ""
    return (
        "<div class='bridge-client-turn'>"
        f"<span style='color:{colour}'>&#9679;</span> <code>{html.escape(status_line(turn))}</code>"
        f"{body}</div>"
    )

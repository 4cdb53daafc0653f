"""How the ``openai`` driver (:mod:`bridge_client.drivers.openai_chat`) reads one model
answer into the open step: the chunks the reader thread (:mod:`.openai_http`) queues become
``text-delta`` and ``reasoning-delta`` parts as they come (the chunks of one network read as
one batch), tool-call fragments are joined by ``index``, and the answer is complete at its
``finish_reason``.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import requests

from ..bridge.driver import TurnContext
from .openai_http import _abort, _Cut, _read_stream

__all__ = ["read_answer", "apply_chunk"]


class _Answer(NamedTuple):
    """One model call's answer: its text, tool calls ``[(id, name, arguments text)]``,
    finish reason and usage."""

    text: str
    tool_calls: List[Tuple[str, str, str]]
    finish_reason: str
    usage: Any


def read_answer(ctx: TurnContext, response: requests.Response) -> Optional[_Answer]:
    """Read one model call's streamed ``response`` into the open step: its deltas as parts,
    its tool-call fragments joined. Returns the answer, or ``None`` when cancelled.
    Raises :class:`_Cut` (the stream broke or ended early).

    The stream is read by a reader thread that queues its events; this thread emits them
    and watches the cancel event, so a cancel returns at once even while the read
    blocks (the socket is shut down to end that read; the reader then exits by itself).
    """
    events: "queue.Queue[Tuple[str, Any]]" = queue.Queue()
    reader = threading.Thread(
        target=_read_stream, args=(response, events), name="openai-stream", daemon=True
    )
    reader.start()
    text: List[str] = []
    calls: Dict[int, List[str]] = {}
    finish: Optional[str] = None
    usage: Any = None
    carry: Optional[Tuple[str, Any]] = None
    while True:
        if ctx.cancelled.is_set():
            _abort(response)
            return None
        if carry is not None:
            (kind, value), carry = carry, None
        else:
            try:
                kind, value = events.get(timeout=0.05)
            except queue.Empty:
                continue
        if kind == "end":
            break
        if kind == "cut":
            reader.join(1.0)
            raise _Cut(value)
        # The chunks already queued behind this one (one network read often holds several)
        # go to the log as one batch of text deltas (ctx.texts): the same parts, one hand-off.
        batch = [value]
        while True:
            try:
                more = events.get_nowait()
            except queue.Empty:
                break
            if more[0] != "chunk":
                carry = more  # "end" or "cut": handled on the next pass
                break
            batch.append(more[1])
        pending: List[str] = []
        try:
            for value in batch:
                apply_chunk(ctx, value, text, calls, pending)
            _flush(ctx, pending)
        except Exception:  # a malformed chunk, or ctx refused a part
            try:  # the deltas before the bad chunk reach the log, as one at a time would
                _flush(ctx, pending)
            except Exception:
                pass
            _abort(response)
            raise
        except BaseException:  # the bridge is stopping
            _abort(response)
            raise
        for value in batch:
            if value.get("usage"):
                usage = value["usage"]
            for choice in value.get("choices") or []:
                if isinstance(choice, dict) and choice.get("index", 0) == 0 and choice.get(
                    "finish_reason"
                ):
                    finish = str(choice["finish_reason"])
    reader.join(1.0)
    if finish is None:
        raise _Cut("the stream ended before a finish_reason")
    tool_calls = [
        (parts[0] or f"call_{ctx.step}_{i}", parts[1], parts[2])
        for i, parts in sorted(calls.items())
        if parts[1]
    ]
    return _Answer("".join(text), tool_calls, finish, usage)


def apply_chunk(
    ctx: TurnContext,
    chunk: Dict[str, Any],
    text: List[str],
    calls: Dict[int, List[str]],
    pending: Optional[List[str]] = None,
) -> None:
    """Emit one chunk's deltas (choice 0) and join its tool-call fragments into ``calls``.
    With ``pending``, text deltas are added to it (the caller emits them with
    :func:`_flush`) and any other part flushes it first, so the order stays the stream's."""
    for choice in chunk.get("choices") or []:
        if not isinstance(choice, dict) or choice.get("index", 0) != 0:
            continue
        delta = choice.get("delta") or {}
        for key in ("reasoning_content", "reasoning"):
            if isinstance(delta.get(key), str) and delta[key]:
                if pending:
                    _flush(ctx, pending)
                ctx.reasoning(delta[key])
        if isinstance(delta.get("content"), str) and delta["content"]:
            text.append(delta["content"])
            if pending is None:
                ctx.text(delta["content"])
            else:
                pending.append(delta["content"])
        for frag in delta.get("tool_calls") or []:
            _add_fragment(calls, frag)


def _flush(ctx: TurnContext, pending: List[str]) -> None:
    """Emit the text deltas gathered in ``pending`` (one ``ctx.text``, or one ``ctx.texts``
    for several) and empty it."""
    if len(pending) == 1:
        ctx.text(pending[0])
    elif pending:
        ctx.texts(pending)
    pending.clear()


def _add_fragment(calls: Dict[int, List[str]], frag: Any) -> None:
    """Join one ``delta.tool_calls[]`` fragment into ``calls[index] = [id, name, arguments]``."""
    if not isinstance(frag, dict):
        return
    index = frag.get("index", len(calls))
    if not isinstance(index, int):
        return
    entry = calls.setdefault(index, ["", "", ""])
    if isinstance(frag.get("id"), str) and frag["id"]:
        entry[0] = frag["id"]
    function = frag.get("function") or {}
    if isinstance(function, dict):
        if isinstance(function.get("name"), str) and function["name"] and not entry[1]:
            entry[1] = function["name"]
        if isinstance(function.get("arguments"), str):
            entry[2] += function["arguments"]

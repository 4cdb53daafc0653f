"""Decoding a Chunk of text or reasoning deltas straight into parts (the host's per-part path).

A bridge of this package writes a part's JSON in one form (``{"type":"text-delta","index":..,
"step":..,"attempt":..,"text":".."}``, no spaces) and a Chunk as ``{"_tag":"Chunk",
"requestId":"..","values":[..]}``. :func:`delta_chunk` recognises a frame made only of that,
with one regular-expression scan in C, and builds its parts with C loops (``map``) instead of
a JSON object per part and then a part per object: about a third of the host's work per part.

It accepts only what ``json.loads`` plus ``part_from_dict`` would turn into the same parts;
anything else (another form, a field out of range, another part type, a mix of the two delta
types) gives ``None``, and the caller takes the general path, which raises the usual errors.
"""

import re
from collections import deque
from functools import lru_cache
from itertools import repeat
from json.decoder import scanstring  # type: ignore[attr-defined]  # (C, json's own)
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from .parts import _DELTA_TYPES, MAX_SAFE_INTEGER, Part, _new_object, _set_attempt, _set_index, _set_step

__all__ = ["delta_chunk"]

_HEAD = re.compile(r'\{"_tag":"Chunk","requestId":"([0-9]{1,20})","values":\[')
# A JSON string's characters: no quote, backslash or control character, or a valid escape.
_CHARS = r'[^"\\\x00-\x1f]*(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})[^"\\\x00-\x1f]*)*'
_NUMBER = r"0|[1-9][0-9]{0,15}"  # JSON's integers without sign (16 digits: MAX_SAFE_INTEGER's)
# The literal text of one value, around its five fields (each value led by a comma: see below).
_PIECES = (',{"type":"', '-delta","index":', ',"step":', ',"attempt":', ',"text":"', '"}')
_FIELDS = ("(text|reasoning)", f"({_NUMBER})", f"({_NUMBER}|null)", "([1-9][0-9]{0,15})", f"({_CHARS})")
_VALUE = re.compile("".join(re.escape(p) + f for p, f in zip(_PIECES, _FIELDS)) + re.escape(_PIECES[-1]))
_KINDS: Dict[str, Any] = {"text": _DELTA_TYPES["text-delta"], "reasoning": _DELTA_TYPES["reasoning-delta"]}
_drain: Callable[[Iterable[Any]], None] = deque(maxlen=0).extend  # runs a map to its end, in C


def delta_chunk(data: Any) -> Optional[Tuple[str, List[Part]]]:
    """The request id and parts of a Chunk frame of deltas of one kind, in this package's form.

    Args:
        data: a WebSocket message (``bytes`` of UTF-8 JSON; anything else gives ``None``).

    Returns:
        ``(request_id, parts)``: the parts are :class:`~.parts.TextDelta` (or all
        :class:`~.parts.ReasoningDelta`) objects equal to what ``part_from_dict`` builds from
        the frame's values; or ``None`` when the frame is anything else (decode it the general
        way). Never raises for bad input.
    """
    if type(data) is not bytes:
        return None
    try:
        s = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    head = _HEAD.match(s)
    if head is None or not s.endswith("]}"):
        return None
    # Each value led by a comma, the first one too: split at the values, the array is made of
    # them alone when every piece between two values (and at the ends) is empty.
    body = "," + s[head.end() : -2]
    first = _VALUE.match(body)
    if first is None:
        return None
    kind, _, step, attempt, _ = first.groups()
    # The common case: one step and attempt throughout, split out with two fields only.
    pieces = _run_of(kind, step, attempt).split(body)
    if not any(pieces[::3]):
        n = len(pieces) // 3
        indexes, texts = pieces[1::3], pieces[2::3]
        steps, attempts = _ints((step,) * n, n), _ints((attempt,) * n, n)
    else:
        pieces = _VALUE.split(body)
        if any(pieces[::6]) or pieces[1::6].count(kind) != len(pieces) // 6:
            return None  # not values alone, or both kinds: the general way
        n = len(pieces) // 6
        indexes, texts = pieces[2::6], pieces[5::6]
        steps, attempts = _ints(pieces[3::6], n), _ints(pieces[4::6], n)
    if steps is None or attempts is None:
        return None
    cls, set_text = _KINDS[kind]
    index = list(map(int, indexes))
    if max(index) > MAX_SAFE_INTEGER:
        return None
    if "\\" in body:  # escapes: JSON's own string decoder, for the texts that have one
        texts = [scanstring(t + '"', 0, True)[0] if "\\" in t else t for t in texts]
    parts: List[Part] = list(map(_new_object, repeat(cls, n)))
    _drain(map(_set_index, parts, index))
    _drain(map(_set_step, parts, steps))
    _drain(map(_set_attempt, parts, attempts))
    _drain(map(set_text, parts, texts))
    return head.group(1), parts


@lru_cache(maxsize=32)
def _run_of(kind: str, step: str, attempt: str) -> "re.Pattern[str]":
    """The pattern of a value of that kind, step and attempt (their text as sent), with two
    groups: the index and the text."""
    p = _PIECES
    return re.compile(
        f"{re.escape(p[0])}{kind}{re.escape(p[1])}({_NUMBER}){re.escape(p[2])}{step}"
        f"{re.escape(p[3])}{attempt}{re.escape(p[4])}({_CHARS}){re.escape(p[5])}"
    )


def _ints(fields: Sequence[str], n: int) -> Any:
    """The values of integer fields (``null``: ``None``) as an iterable of ``n``, or ``None``
    when one is above ``MAX_SAFE_INTEGER``. One value for all (the common case) is read once."""
    if fields.count(fields[0]) == n:
        one = None if fields[0] == "null" else int(fields[0])
        return None if one is not None and one > MAX_SAFE_INTEGER else repeat(one, n)
    values = [None if f == "null" else int(f) for f in fields]
    if max(v for v in values if v is not None) > MAX_SAFE_INTEGER:
        return None
    return values

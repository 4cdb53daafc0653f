"""A part's JSON text, as the log keeps it: encoded once (the same string is the segment's
content, the in-memory log entry and the Chunk value), and its columns read back from it."""
from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Optional, Sequence

from .records import StoredPart

__all__ = ["json_text", "part_text", "text_parts", "stored_part"]

_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
_encode_str = json.encoder.encode_basestring  # C-accelerated


def _utf8_checked(text: str) -> str:
    # A lone surrogate would pass json.dumps and then fail in SQLite or on the wire; refuse it
    # here, where the caller can be told, rather than in the writer thread.
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("text holds a lone surrogate: it is not valid Unicode") from None
    return text


def json_text(value: Any) -> str:
    """Encode ``value`` as the compact JSON the store keeps (UTF-8 kept as is).

    Raises:
        TypeError: ``value`` holds something JSON cannot carry.
        ValueError: a float in it is NaN or infinite, or a string holds a lone surrogate.
    """
    return _utf8_checked(_ENCODER.encode(value))


def part_text(kind: str, index: int, step: Optional[int], attempt: int, fields: Dict[str, Any]) -> str:
    """Encode a part as ``{"type", "index", "step", "attempt", ...fields}`` JSON text.

    The hot path of a turn (a text delta is one string field) is formatted directly, without
    building a dict.

    Raises:
        TypeError / ValueError: as :func:`json_text`.
    """
    head = '{"type":"%s","index":%d,"step":%s,"attempt":%d' % (
        kind,
        index,
        "null" if step is None else "%d" % step,
        attempt,
    )
    if not fields:
        return head + "}"
    if len(fields) == 1:
        text = fields.get("text")
        if type(text) is str:
            return _utf8_checked(head + ',"text":' + _encode_str(text) + "}")
    return _utf8_checked(head + "," + _ENCODER.encode(fields)[1:])


def text_parts(kind: str, first: int, step: Optional[int], attempt: int, texts: Sequence[str]) -> List[str]:
    """Encode consecutive one-text parts (``text-delta``, ``reasoning-delta``) with indexes from
    ``first``: the same strings as ``part_text(kind, first + i, step, attempt, {"text": t})``.

    Raises:
        TypeError: a text is not a str. ValueError: a text holds a lone surrogate.
    """
    head = '{"type":"%s","index":' % kind
    tail = ',"step":%s,"attempt":%d,"text":' % ("null" if step is None else "%d" % step, attempt)
    out: List[str] = []
    append = out.append
    index = first
    for t in texts:
        if type(t) is not str:
            raise TypeError(f"a text must be a str, got {type(t).__name__}")
        append(head + str(index) + tail + _encode_str(t) + "}")
        if not t.isascii():
            _utf8_checked(t)
        index += 1
    return out


_HEAD = re.compile(r'\{"type":"([^"\\]*)","index":\d+,"step":(null|\d+),"attempt":(\d+)')


def stored_part(index: int, text: str) -> StoredPart:
    """Rebuild a part's columns from its JSON text (which :func:`part_text` starts with
    ``type``, ``index``, ``step``, ``attempt``)."""
    m = _HEAD.match(text)
    if m is not None:
        kind, step, attempt = m.groups()
        return StoredPart(index, None if step == "null" else int(step), int(attempt), kind, text)
    value = json.loads(text)
    step_value = value.get("step")
    return StoredPart(index, step_value, int(value.get("attempt", 1)), str(value.get("type")), text)

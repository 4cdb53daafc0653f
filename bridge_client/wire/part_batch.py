"""Building a stream's parts a batch at a time (the host's per-part path).

:func:`parts_from_dicts` gives the same parts, with the same checks and errors, as
:func:`~bridge_client.wire.parts.part_from_dict` called on each value, in one call: a batch of
text and reasoning deltas is built without a function call per part, and the caller learns
whether it is a plain run (deltas with consecutive indexes) that needs no look per part.
"""

from operator import attrgetter
from typing import Any, List, Optional, Sequence, Tuple

from .parts import (
    _DELTA_TYPES,
    MAX_SAFE_INTEGER,
    Part,
    _new_object,
    _set_attempt,
    _set_index,
    _set_step,
    part_from_dict,
)

__all__ = ["parts_from_dicts"]

_BUILT = frozenset(cls for cls, _ in _DELTA_TYPES.values())  # delta parts given built
_index_of = attrgetter("index")


def parts_from_dicts(
    values: Sequence[Any], start: int = 0, stop: Optional[int] = None
) -> Tuple[List[Part], bool]:
    """Build the parts of ``values[start:stop]``, each as ``part_from_dict`` builds it.

    Args:
        values: JSON objects, each a part's wire form (``dict``); a segment made only of
            ``TextDelta`` and ``ReasoningDelta`` objects (built already) is given back as it is.
        start, stop: the slice of ``values`` to build (``stop`` ``None``: to the end).

    Returns:
        ``(parts, run)``: the parts (a new ``list``, in order), and whether they are a plain
        run: every one a ``TextDelta`` or ``ReasoningDelta``, each ``index`` one more than the
        one before.

    Raises:
        ProtocolError: a value that is not a valid part (the error ``part_from_dict`` raises).
    """
    segment = list(values[start:stop])
    if segment and type(segment[0]) in _BUILT and _BUILT.issuperset(map(type, segment)):
        # Built already (by the connection's reader: see delta_chunk): only the run to tell.
        first = segment[0].index
        return segment, list(map(_index_of, segment)) == list(range(first, first + len(segment)))
    out: List[Part] = []
    append = out.append
    deltas = _DELTA_TYPES
    only_deltas = True
    expected, breaks = -1, 0  # the index a run's next part has; how often it had another
    for d in segment:
        # part_from_dict's fast path, inline; anything that fails a check goes through it.
        delta = None
        if type(d) is dict:
            name = d.get("type")
            if type(name) is str:
                delta = deltas.get(name)
        elif type(d) in _BUILT:  # a delta built already, among JSON objects
            if d.index != expected:
                breaks += 1
            expected = d.index + 1
            append(d)
            continue
        if delta is not None:
            index, step, attempt, text = d.get("index"), d.get("step"), d.get("attempt"), d.get("text")
            if (
                type(index) is int
                and 0 <= index <= MAX_SAFE_INTEGER
                and (step is None or (type(step) is int and 0 <= step <= MAX_SAFE_INTEGER))
                and type(attempt) is int
                and 1 <= attempt <= MAX_SAFE_INTEGER
                and type(text) is str
            ):
                if index != expected:
                    breaks += 1
                expected = index + 1
                delta_cls, set_text = delta
                part: Part = _new_object(delta_cls)
                _set_index(part, index)
                _set_step(part, step)
                _set_attempt(part, attempt)
                set_text(part, text)
                append(part)
                continue
        part = part_from_dict(d)
        append(part)
        only_deltas = False  # a part the fast path did not build: the caller looks at it
    return out, only_deltas and breaks <= 1

"""The turn's conversion of a batch (the per-part path): deltas in order go in
whole segments, anything else part by part; a resend that overlaps keeps each part once."""
from __future__ import annotations

from typing import Any, List

from bridge_client.client.read_state import CHECKPOINT_EVERY, NO_CHECKPOINT, ReadState
from bridge_client.client.turn import Turn
from bridge_client.wire.parts import StepFinish, TextDelta


def _bare_turn() -> Any:
    """A Turn with only the read state (no session, no connection): _convert and __next__
    over batches handed in directly."""
    t = object.__new__(Turn)
    t._suspended, t._due, t._exhausted = False, None, False
    t._st, t._checkpoint, t._state, t.id = ReadState.first(0), NO_CHECKPOINT, None, "t"
    t._texts, t._runs, t._pos = [], [], (None, 0, 0)
    t._lost_since = t._restarted_since = None
    t._overloaded = 0.0
    return t


def _delta(i: int, text: str = "x") -> dict:
    return {"type": "text-delta", "index": i, "step": 0, "attempt": 1, "text": text}


def _publish(t: Any, values: List[dict]) -> List[Any]:
    t._convert((t._st.cursor.batch + 1, values, []))
    return [t.__next__() for _ in range(len(t._st.parts))]


def test_overlapping_resends_keep_each_part_once():
    t = _bare_turn()
    got = _publish(t, [_delta(i, str(i % 10)) for i in range(100)])
    # A resend from 90 (what a new ReadTurn after a drop may overlap), then new parts.
    got += _publish(t, [_delta(i, str(i % 10)) for i in range(90, 300)])
    finish = {"type": "step-finish", "index": 301, "step": 0, "attempt": 1, "finishReason": "stop",
              "usage": None}
    got += _publish(t, [_delta(250), _delta(300, "0"), finish])
    assert [p.index for p in got] == list(range(302))
    assert all(type(p) is TextDelta for p in got[:301]) and type(got[-1]) is StepFinish
    assert t._st.cursor.offset == 302 and t._st.cursor.steps == 1 and t.steps == 1
    assert t.text() == "".join(str(i % 10) for i in range(301))


def test_a_gap_in_the_indexes_goes_part_by_part_and_keeps_them_all():
    t = _bare_turn()
    values = [_delta(i) for i in range(CHECKPOINT_EVERY)]
    values += [_delta(i) for i in range(500, 500 + CHECKPOINT_EVERY)]
    values[3], values[5] = _delta(40), _delta(41)  # out of order: what follows up to 41 is skipped
    got = _publish(t, values)
    kept = [0, 1, 2, 40, 41] + list(range(42, CHECKPOINT_EVERY)) + list(range(500, 500 + CHECKPOINT_EVERY))
    assert [p.index for p in got] == kept
    assert t._checkpoint.used == len(values) and t._st.cursor.offset == 500 + CHECKPOINT_EVERY


def test_text_and_the_parts_left_are_exact_between_deltas_and_other_parts():
    # Text deltas move only Turn._pos; text(), the parts not yet yielded and the steps agree
    # with what was yielded at every point, across a step-finish and into the next batch.
    t = _bare_turn()
    finish = {"type": "step-finish", "index": 5, "step": 0, "attempt": 1, "finishReason": "stop",
              "usage": None}
    t._convert((1, [_delta(i, "abcde"[i]) for i in range(5)] + [finish, _delta(6, "f")], []))
    seen = []
    for expected in ("a", "ab", "abc", "abcd", "abcde", "abcde", "abcdef"):
        seen.append(t.__next__())
        assert t.text() == expected
        assert [p.index for p in t._unyielded()] == list(range(len(seen), 7))
    assert t.steps == 1 and t._yielded()[1] == 7
    got = _publish(t, [_delta(7, "g"), _delta(8, "h")])
    assert [p.index for p in seen + got] == list(range(9)) and t.text() == "abcdefgh"

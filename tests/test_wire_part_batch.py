"""Parts built a batch at a time (the per-part path): ``parts_from_dicts`` gives the
same parts and the same errors as ``part_from_dict`` on each value."""
from __future__ import annotations

import copy
import pickle

import pytest
from test_wire_parts import GOOD, _good

from bridge_client.errors import ProtocolError
from bridge_client.wire.part_batch import parts_from_dicts
from bridge_client.wire.parts import ReasoningDelta, TextDelta, part_from_dict


def _deltas(n, first=0, step=0):
    return [{"type": "text-delta", "index": first + i, "step": step, "attempt": 1, "text": chr(97 + i % 26)}
            for i in range(n)]


def test_a_batch_of_every_part_type_equals_part_from_dict_on_each_value():
    values = [_good(kind, index=i) for i, kind in enumerate(GOOD)] + _deltas(5, first=len(GOOD))
    built, run = parts_from_dicts(values)
    assert built == [part_from_dict(v) for v in values]
    assert [type(p) for p in built] == [type(part_from_dict(v)) for v in values]
    assert not run


def test_a_slice_of_deltas_in_order_is_a_run():
    values = [_good("step-start", index=0)] + _deltas(3, first=1) + [_good("reasoning-delta", index=4)]
    built, run = parts_from_dicts(values, 1, 5)
    assert run and [p.index for p in built] == [1, 2, 3, 4]
    assert isinstance(built[-1], ReasoningDelta)
    assert parts_from_dicts(values, 0, 2)[1] is False
    assert parts_from_dicts(values, 3) == (built[2:], True)


def test_deltas_out_of_order_are_no_run_even_with_the_ends_of_one():
    values = _deltas(6)
    values[1], values[2] = values[2], values[1]  # 0 2 1 3 4 5: first and last as in a run
    assert parts_from_dicts(values)[1] is False
    assert parts_from_dicts(_deltas(2) + _deltas(2, first=5))[1] is False
    assert parts_from_dicts(_deltas(2) + _deltas(2, first=1))[1] is False


def test_fast_built_deltas_behave_like_constructed_ones():
    fast, _ = parts_from_dicts([{"type": "text-delta", "index": 7, "step": None, "attempt": 2, "text": "hé"}])
    made = TextDelta(7, None, 2, "hé")
    part = fast[0]
    assert type(part) is TextDelta and part == made and hash(part) == hash(made)
    assert repr(part) == repr(made) == "TextDelta(index=7, step=None, attempt=2, text='hé')"
    assert pickle.loads(pickle.dumps(part)) == made and copy.deepcopy(part) == made
    assert part.to_dict() == made.to_dict() and not hasattr(part, "__dict__")
    with pytest.raises(AttributeError):
        part.text = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    "bad",
    [
        {"type": "text-delta", "index": -1, "step": 0, "attempt": 1, "text": "x"},
        {"type": "text-delta", "index": 1, "step": 0, "attempt": 0, "text": "x"},
        {"type": "text-delta", "index": 1, "step": "0", "attempt": 1, "text": "x"},
        {"type": "text-delta", "index": True, "step": 0, "attempt": 1, "text": "x"},
        {"type": "text-delta", "index": 1, "step": 0, "attempt": 1, "text": 5},
        {"type": "text-delta", "index": 2**53, "step": 0, "attempt": 1, "text": "x"},
        {"type": "text-delta", "index": 1, "step": 0, "attempt": 1},
        {"type": ["text-delta"], "index": 1, "step": 0, "attempt": 1, "text": "x"},
        {"type": "nope", "index": 1, "step": 0, "attempt": 1},
        ["text-delta"],
        None,
    ],
)
def test_a_bad_value_in_a_batch_raises_what_part_from_dict_raises(bad):
    with pytest.raises(ProtocolError) as single:
        part_from_dict(bad)
    with pytest.raises(ProtocolError) as batch:
        parts_from_dicts(_deltas(3) + [bad] + _deltas(2, first=3))
    assert str(batch.value) == str(single.value)


def test_a_bool_or_float_index_is_no_fast_path_int():
    # bool is an int subclass and 1.0 == 1: the fast path takes exact ints only, the rest is
    # judged by part_from_dict (which rejects both).
    for index in (True, 1.0):
        with pytest.raises(ProtocolError):
            parts_from_dicts([{"type": "text-delta", "index": index, "step": 0, "attempt": 1, "text": "x"}])

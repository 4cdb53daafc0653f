"""A Chunk of deltas decoded straight into parts (the per-part path): ``delta_chunk``
gives exactly the parts that ``parse_frame`` + ``part_from_dict`` give, or ``None`` (the
general path then decodes the frame and raises its usual errors); it never raises."""
from __future__ import annotations

import json
from typing import Any, List, Optional

from hypothesis import given, settings
from hypothesis import strategies as st

from bridge_client.bridge.turn_sink import _encode_str
from bridge_client.errors import ProtocolError
from bridge_client.wire.delta_chunk import delta_chunk
from bridge_client.wire.frames import FrameError, bridge_message, encode_chunk_raw, parse_frame
from bridge_client.wire.part_batch import parts_from_dicts
from bridge_client.wire.parts import MAX_SAFE_INTEGER, ReasoningDelta, TextDelta, part_from_dict


def _bridge_form(kind: str, index: int, step: Optional[int], attempt: int, text: str) -> str:
    """A part's JSON as the bridge's per-step appender writes it (RunSink.text_appender)."""
    tail = ',"step":%s,"attempt":%d,"text":' % ("null" if step is None else "%d" % step, attempt)
    return f'{{"type":"{kind}","index":{index}{tail}{_encode_str(text)}}}'


def _frame(values: List[str], request_id: str = "7") -> bytes:
    return encode_chunk_raw(request_id, values).encode("utf-8")


def _general(data: bytes) -> Any:
    """What the reader and the turn make of a frame the general way (or the error)."""
    try:
        (obj,) = parse_frame(data)
        chunk = bridge_message(obj)
        return str(chunk.request_id), [part_from_dict(v) for v in chunk.values]  # type: ignore[union-attr]
    except (FrameError, ProtocolError, ValueError) as exc:
        return exc


def _same(data: bytes) -> Optional[Any]:
    fast = delta_chunk(data)
    if fast is not None:
        general = _general(data)
        assert not isinstance(general, BaseException), (data[:200], general)
        assert fast == general
        assert [type(p) for p in fast[1]] == [type(p) for p in general[1]]
    return fast


def test_a_chunk_as_the_bridge_writes_it_is_built_into_the_same_parts():
    texts = ["a", "é", "\n", '"', "\\", "😀"]
    values = [_bridge_form("text-delta", 40 + i, 3, 1, t) for i, t in enumerate(texts)]
    got = _same(_frame(values))
    assert got is not None and got[0] == "7"
    assert [p.text for p in got[1]] == ["a", "é", "\n", '"', "\\", "😀"]
    assert all(type(p) is TextDelta and p.step == 3 and p.attempt == 1 for p in got[1])


def test_reasoning_deltas_null_steps_and_changing_steps_and_attempts_are_built_too():
    values = [_bridge_form("reasoning-delta", i, None if i < 2 else i, 1 + i % 3, "r") for i in range(6)]
    got = _same(_frame(values))
    assert got is not None and all(type(p) is ReasoningDelta for p in got[1])
    assert [p.step for p in got[1]] == [None, None, 2, 3, 4, 5]


def test_anything_else_goes_the_general_way():
    ok = _bridge_form("text-delta", 1, 0, 1, "a")
    for values in (
        [ok, _bridge_form("reasoning-delta", 2, 0, 1, "b")],  # both kinds in one Chunk
        [ok, '{"type":"step-start","index":2,"step":0,"attempt":1}'],  # another part type
        [ok.replace('"index":1', '"index":01')],  # not JSON
        [ok.replace('"index":1', f'"index":{MAX_SAFE_INTEGER + 1}')],  # out of range: ProtocolError
        [ok.replace('"attempt":1', '"attempt":0')],
        [ok.replace('"step":0', f'"step":{MAX_SAFE_INTEGER + 1}')],
        [ok.replace('"index":1', '"index":1.0')],
        [ok.replace('"a"', '"\\x"')],  # a bad escape
        [ok.replace('"a"', '"\x01"')],  # a control character
        [ok.replace(",", ", ")],  # another form of the same JSON: fine, but not this path's
        [ok[:-1] + ',"extra":1}'],
    ):
        assert delta_chunk(_frame(values)) is None, values
    frame = _frame([ok, ok])
    for bad in (frame.replace(b"},{", b"}X{"), frame.replace(b"},{", b"},1,{"), frame[:-1], b"\xff" + frame,
                frame.replace(b'"7"', b'"x"'), frame.replace(b"]}", b"],\"x\":1}")):
        assert delta_chunk(bad) is None, bad
    assert delta_chunk(frame.decode()) is None  # only bytes (as the socket gives them)


_texts = st.text(st.characters(), max_size=8)


@settings(max_examples=300, deadline=None)
@given(
    kind=st.sampled_from(["text-delta", "reasoning-delta"]),
    first=st.integers(0, 2**60),
    steps=st.lists(st.one_of(st.none(), st.integers(0, 2**60)), min_size=1, max_size=6),
    attempts=st.lists(st.integers(0, 2**60), min_size=1, max_size=6),
    texts=st.lists(_texts, min_size=1, max_size=12),
    ascii_only=st.booleans(),
)
def test_any_chunk_of_deltas_gives_the_general_paths_parts_or_none(
    kind, first, steps, attempts, texts, ascii_only
):
    values = [
        json.dumps(
            {"type": kind, "index": first + i, "step": steps[i % len(steps)],
             "attempt": attempts[i % len(attempts)], "text": t},
            separators=(",", ":"), ensure_ascii=ascii_only,
        )
        for i, t in enumerate(texts)
    ]
    try:
        frame = _frame(values)
    except UnicodeEncodeError:  # a lone surrogate written raw: not UTF-8, never sent
        return
    got = _same(frame)
    used_steps = [steps[i % len(steps)] for i in range(len(texts))]
    used_attempts = [attempts[i % len(attempts)] for i in range(len(texts))]
    in_range = first + len(texts) - 1 <= MAX_SAFE_INTEGER and all(
        s is None or s <= MAX_SAFE_INTEGER for s in used_steps) and all(
        1 <= a <= MAX_SAFE_INTEGER for a in used_attempts)
    assert (got is not None) == in_range


@settings(max_examples=300, deadline=None)
@given(at=st.integers(0, 10_000), cut=st.integers(0, 3), insert=st.binary(max_size=3))
def test_a_damaged_frame_gives_none_or_what_the_general_path_gives(at, cut, insert):
    values = [_bridge_form("text-delta", 5 + i, 1, 2, t) for i, t in enumerate(["a", "b\\c", "d\"", "€"])]
    frame = _frame(values, "12")
    at %= len(frame) + 1
    _same(frame[:at] + insert + frame[at + cut :])


def test_built_deltas_pass_through_parts_from_dicts_as_a_run_or_among_json_objects():
    got = delta_chunk(_frame([_bridge_form("text-delta", 3 + i, 0, 1, "x") for i in range(4)]))
    assert got is not None
    parts = got[1]
    assert parts_from_dicts(parts) == (parts, True)
    assert parts_from_dicts(parts[::-1])[1] is False
    mixed = [{"type": "text-delta", "index": 2, "step": 0, "attempt": 1, "text": "w"}, *parts]
    built, run = parts_from_dicts(mixed)
    assert run and built == [part_from_dict(mixed[0]), *parts]

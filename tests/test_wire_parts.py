"""The values inside the envelope (PROTOCOL.md, "Values"): every part and state survives
``to_dict``/``from_dict`` and ``to_json``/``from_json`` unchanged, and a malformed part is a
ProtocolError that names the field."""
from __future__ import annotations

import dataclasses
import json
import pickle

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from bridge_client.errors import ProtocolError
from bridge_client.wire.host_parts import HOST_TOOL_DECIDERS, HostToolCall, HostToolResult, HostToolStart
from bridge_client.wire.parts import (
    APPROVAL_CHOICES,
    APPROVAL_DECIDERS,
    FINISH_REASONS,
    PART_TYPES,
    TURN_STATUSES,
    Data,
    HelloResult,
    Part,
    ReasoningDelta,
    SessionState,
    SessionStateChanged,
    StartTurnResult,
    StepFinish,
    StepReset,
    StepStart,
    TextDelta,
    ToolCall,
    ToolResult,
    TurnFinish,
    TurnStart,
    TurnState,
    ApprovalAnswer,
    ApprovalRequest,
    UserMessage,
    part_from_dict,
)

# ----------------------------------------------------------------------------- strategies

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)
texts = st.text(max_size=20)
counts = st.integers(min_value=0, max_value=2**53 - 1)
steps = st.none() | counts
attempts = st.integers(min_value=1, max_value=10_000)

turn_states = st.builds(
    TurnState,
    protocol=st.integers(min_value=1, max_value=100),
    agent_id=texts,
    bridge_id=texts,
    session_id=texts,
    turn_id=texts,
    prompt=st.text(),
    started_at=texts,
)
session_states = st.builds(SessionState, session_id=texts, revision=counts, data=json_values)
hello_results = st.builds(
    HelloResult,
    agent_id=texts,
    bridge_id=texts,
    instance=texts,
    protocol=counts,
    pid=counts,
    started_at=texts,
)
start_turn_results = st.builds(StartTurnResult, turn_id=texts, status=st.sampled_from(TURN_STATUSES))


def _part(cls, **fields):
    return st.builds(cls, index=counts, step=steps, attempt=attempts, **fields)


PART_STRATEGIES = {
    TurnStart: _part(TurnStart, turn=turn_states),
    StepStart: _part(StepStart),
    TextDelta: _part(TextDelta, text=st.text()),
    ReasoningDelta: _part(ReasoningDelta, text=st.text()),
    ToolCall: _part(ToolCall, tool_call_id=texts, tool_name=texts, input=json_values),
    ToolResult: _part(
        ToolResult, tool_call_id=texts, tool_name=texts, output=json_values, is_error=st.booleans()
    ),
    StepFinish: _part(StepFinish, finish_reason=texts, usage=json_values),
    StepReset: _part(
        StepReset,
        discarded_attempt=attempts,
        reason=texts,
        tool_call_ids=st.lists(texts, max_size=4).map(tuple),
    ),
    SessionStateChanged: _part(SessionStateChanged, state=session_states),
    Data: _part(Data, name=texts, data=json_values),
    TurnFinish: _part(
        TurnFinish,
        finish_reason=st.sampled_from(FINISH_REASONS),
        usage=json_values,
        error=st.none() | texts,
    ),
    ApprovalRequest: _part(
        ApprovalRequest,
        request_id=texts,
        tool_call_id=texts,
        tool_name=texts,
        input=json_values,
        choices=st.lists(st.sampled_from(APPROVAL_CHOICES), min_size=1, max_size=3).map(tuple),
        title=st.none() | texts,
    ),
    ApprovalAnswer: _part(
        ApprovalAnswer,
        request_id=texts,
        decision=st.sampled_from(APPROVAL_CHOICES),
        message=st.none() | texts,
        by=st.sampled_from(APPROVAL_DECIDERS),
    ),
    UserMessage: _part(UserMessage, message_id=texts, text=st.text()),
    HostToolCall: _part(HostToolCall, call_id=texts, tool_call_id=texts, tool_name=texts, input=json_values),
    HostToolStart: _part(HostToolStart, call_id=texts, host_id=texts),
    HostToolResult: _part(
        HostToolResult,
        call_id=texts,
        tool_name=texts,
        output=json_values,
        is_error=st.booleans(),
        by=st.sampled_from(HOST_TOOL_DECIDERS),
    ),
}
parts = st.one_of(*PART_STRATEGIES.values())


def test_every_part_type_has_a_strategy():
    # A new part type must be added to the property tests below.
    assert set(PART_STRATEGIES) == set(PART_TYPES.values())


def test_part_types_are_the_protocol_names():
    assert set(PART_TYPES) == {
        "turn-start",
        "step-start",
        "text-delta",
        "reasoning-delta",
        "tool-call",
        "tool-result",
        "step-finish",
        "step-reset",
        "session-state",
        "data",
        "turn-finish",
        "approval-request",
        "approval-answer",
        "user-message",
        "host-tool-call",
        "host-tool-start",
        "host-tool-result",
    }
    for name, cls in PART_TYPES.items():
        assert cls.type == name and issubclass(cls, Part)


# ----------------------------------------------------------------------------- round trips


@settings(max_examples=300)
@given(parts)
def test_every_part_survives_dict_and_json_round_trips(part):
    d = part.to_dict()
    assert d["type"] == type(part).type
    assert {"index", "step", "attempt"} <= set(d)
    json.dumps(d, allow_nan=False)  # plain JSON, nothing Python-only left in it
    for decoded in (
        part_from_dict(d),
        Part.from_dict(d),
        type(part).from_dict(d),
        Part.from_json(part.to_json()),
        type(part).from_json(part.to_json()),
        Part.from_json(part.to_json().encode("utf-8")),
    ):
        assert decoded == part
        assert type(decoded) is type(part)
    assert json.loads(part.to_json()) == d


@settings(max_examples=200)
@given(st.one_of(turn_states, session_states, hello_results, start_turn_results))
def test_every_state_and_result_survives_dict_and_json_round_trips(value):
    cls = type(value)
    d = value.to_dict()
    assert cls.from_dict(d) == value
    assert cls.from_json(value.to_json()) == value
    assert json.loads(value.to_json()) == d


def test_values_use_camel_case_keys_on_the_wire():
    ts = TurnState(1, "agent", "bridge", "s", "t", "p", "2024-01-01T00:00:00Z")
    assert ts.to_dict() == {
        "protocol": 1,
        "agentId": "agent",
        "bridgeId": "bridge",
        "sessionId": "s",
        "turnId": "t",
        "prompt": "p",
        "startedAt": "2024-01-01T00:00:00Z",
        "generation": None,  # unknown: a state from before store generations (B10)
    }
    assert SessionState("s", 2, {"k": [1]}).to_dict() == {"sessionId": "s", "revision": 2, "data": {"k": [1]}}
    assert ToolResult(3, 0, 1, "c", "n", None, True).to_dict() == {
        "type": "tool-result",
        "index": 3,
        "step": 0,
        "attempt": 1,
        "toolCallId": "c",
        "toolName": "n",
        "output": None,
        "isError": True,
    }
    assert StepReset(4, 1, 2, 1, "restart", ("c1",)).to_dict()["toolCallIds"] == ["c1"]
    assert TurnStart(0, None, 1, ts).to_dict()["turn"] == ts.to_dict()
    assert HelloResult("a", "b", "i", 1, 2, "t").to_dict() == {
        "agentId": "a",
        "bridgeId": "b",
        "instance": "i",
        "protocol": 1,
        "pid": 2,
        "startedAt": "t",
        "generation": None,
    }


def test_to_json_is_compact_and_keeps_utf8():
    text = TextDelta(1, 0, 1, "é ✓").to_json()
    assert "é ✓" in text and ": " not in text


def test_to_json_refuses_nan():
    with pytest.raises(ValueError):
        Data(1, 0, 1, "x", float("nan")).to_json()


@pytest.mark.parametrize(
    "part",
    [
        TurnStart(0, None, 1, TurnState(1, "a", "b", "s", "t", "p", "x")),
        StepStart(1, 0, 1),
        TextDelta(2, 0, 1, "hi"),
        ReasoningDelta(3, 0, 1, "hmm"),
        ToolCall(4, 0, 1, "c", "sh", {"cmd": "ls"}),
        ToolResult(5, 0, 1, "c", "sh", "out", False),
        StepFinish(6, 0, 1, "tool-calls", {"tokens": 3}),
        StepReset(7, 1, 1, 1, "bridge restarted", ("c",)),
        SessionStateChanged(8, 1, 2, SessionState("s", 3, {"x": 1})),
        Data(9, 1, 2, "plan", ["a"]),
        TurnFinish(10, None, 1, "stop", None, None),
        ApprovalRequest(11, 2, 1, "r", "c", "sh", {"cmd": "ls"}, ("allow-once", "deny"), "sh: ls"),
        ApprovalAnswer(12, 2, 1, "r", "allow-once", None, "host"),
        UserMessage(13, None, 1, "m", "and then?"),
    ],
    ids=lambda p: p.type,
)
def test_part_from_json_dispatches_to_the_right_subclass(part):
    decoded = Part.from_json(part.to_json())
    assert type(decoded) is type(part)
    assert decoded == part


# ----------------------------------------------------------------------------- rejections

TS = {
    "protocol": 1,
    "agentId": "a",
    "bridgeId": "b",
    "sessionId": "s",
    "turnId": "t",
    "prompt": "p",
    "startedAt": "x",
}
SS = {"sessionId": "s", "revision": 1, "data": None}

GOOD = {
    "turn-start": {"turn": TS},
    "step-start": {},
    "text-delta": {"text": "t"},
    "reasoning-delta": {"text": "t"},
    "tool-call": {"toolCallId": "c", "toolName": "n", "input": {}},
    "tool-result": {"toolCallId": "c", "toolName": "n", "output": "o", "isError": False},
    "step-finish": {"finishReason": "stop", "usage": None},
    "step-reset": {"discardedAttempt": 1, "reason": "r", "toolCallIds": []},
    "session-state": {"state": SS},
    "data": {"name": "n", "data": 1},
    "turn-finish": {"finishReason": "stop", "usage": None, "error": None},
    "approval-request": {
        "requestId": "r",
        "toolCallId": "c",
        "toolName": "n",
        "input": {},
        "choices": ["allow-once", "deny"],
        "title": None,
    },
    "approval-answer": {"requestId": "r", "decision": "deny", "message": None, "by": "host"},
    "user-message": {"messageId": "m", "text": "t"},
    "host-tool-call": {"callId": "0.1.1-a", "toolCallId": "c", "toolName": "n", "input": {"k": 1}},
    "host-tool-start": {"callId": "0.1.1-a", "hostId": "h"},
    "host-tool-result": {"callId": "0.1.1-a", "toolName": "n", "output": 1, "isError": False, "by": "host"},
}

# Keys whose absence is an error (JSON-valued fields such as ``input`` may be left out: null).
REQUIRED = {
    "turn-start": ["turn"],
    "step-start": [],
    "text-delta": ["text"],
    "reasoning-delta": ["text"],
    "tool-call": ["toolCallId", "toolName"],
    "tool-result": ["toolCallId", "toolName", "isError"],
    "step-finish": ["finishReason"],
    "step-reset": ["discardedAttempt", "reason", "toolCallIds"],
    "session-state": ["state"],
    "data": ["name"],
    "turn-finish": ["finishReason"],
    "approval-request": ["requestId", "toolCallId", "toolName", "choices"],
    "approval-answer": ["requestId", "decision", "by"],
    "user-message": ["messageId", "text"],
    "host-tool-call": ["callId", "toolCallId", "toolName"],
    "host-tool-start": ["callId", "hostId"],
    "host-tool-result": ["callId", "toolName", "isError", "by"],
}


def _good(kind, **changes):
    d = {"type": kind, "index": 1, "step": 0, "attempt": 1, **GOOD[kind]}
    d.update(changes)
    return d


def test_the_good_samples_decode():
    assert set(GOOD) == set(PART_TYPES)
    for kind in GOOD:
        assert part_from_dict(_good(kind)).type == kind


def _rejects(d, *words):
    with pytest.raises(ProtocolError) as info:
        part_from_dict(d)
    for word in words:
        assert word in str(info.value)
    return info.value


@pytest.mark.parametrize("kind", ["nope", "", "Text-Delta", "text_delta", None, 1])
def test_unknown_part_type_is_rejected(kind):
    _rejects({"type": kind, "index": 0, "step": 0, "attempt": 1}, "type")


def test_missing_part_type_is_rejected():
    _rejects({"index": 0, "step": 0, "attempt": 1, "text": "x"}, "type")


@pytest.mark.parametrize("kind", [[], ["text-delta"], {}])
def test_unhashable_part_type_is_a_protocol_error(kind):
    _rejects({"type": kind, "index": 0, "step": 0, "attempt": 1}, "type")


@pytest.mark.parametrize("value", [None, [], "text-delta", 1, [{"type": "step-start"}]], ids=repr)
def test_a_part_must_be_an_object(value):
    with pytest.raises(ProtocolError):
        part_from_dict(value)


@pytest.mark.parametrize(
    "kind,key", [(k, key) for k in REQUIRED for key in ["index", "attempt", *REQUIRED[k]]]
)
def test_missing_required_field_is_rejected(kind, key):
    d = _good(kind)
    del d[key]
    _rejects(d, key)


def test_step_may_be_null_or_missing_for_turn_level_parts():
    assert part_from_dict(_good("turn-finish", step=None)).step is None
    d = _good("turn-finish")
    del d["step"]
    assert part_from_dict(d).step is None


WRONG_TYPES = [
    ("text-delta", "index", True),
    ("text-delta", "index", False),
    ("text-delta", "index", -1),
    ("text-delta", "index", "1"),
    ("text-delta", "index", 1.0),
    ("text-delta", "index", None),
    ("text-delta", "step", True),
    ("text-delta", "step", -1),
    ("text-delta", "step", "0"),
    ("text-delta", "step", 0.5),
    ("text-delta", "attempt", 0),
    ("text-delta", "attempt", -1),
    ("text-delta", "attempt", True),
    ("text-delta", "attempt", None),
    ("text-delta", "text", 1),
    ("text-delta", "text", None),
    ("reasoning-delta", "text", ["t"]),
    ("tool-call", "toolCallId", 1),
    ("tool-call", "toolName", None),
    ("tool-result", "isError", "false"),
    ("tool-result", "isError", 0),
    ("tool-result", "isError", None),
    ("tool-result", "toolCallId", {"id": "c"}),
    ("step-finish", "finishReason", None),
    ("step-finish", "finishReason", 3),
    ("step-reset", "discardedAttempt", 0),
    ("step-reset", "discardedAttempt", True),
    ("step-reset", "reason", None),
    ("step-reset", "toolCallIds", "c1"),
    ("step-reset", "toolCallIds", [1]),
    ("step-reset", "toolCallIds", None),
    ("data", "name", 1),
    ("turn-finish", "finishReason", "done"),
    ("turn-finish", "finishReason", "STOP"),
    ("turn-finish", "finishReason", None),
    ("turn-finish", "error", 1),
    ("turn-finish", "error", {"message": "x"}),
]


@pytest.mark.parametrize("kind,key,value", WRONG_TYPES, ids=repr)
def test_wrong_field_type_is_rejected(kind, key, value):
    _rejects(_good(kind, **{key: value}), key)


@pytest.mark.parametrize(
    "turn,key",
    [
        ("x", "TurnState"),
        (None, "TurnState"),
        ({**TS, "protocol": 0}, "protocol"),
        ({**TS, "protocol": True}, "protocol"),
        ({k: v for k, v in TS.items() if k != "prompt"}, "prompt"),
        ({**TS, "turnId": 5}, "turnId"),
        ({**TS, "startedAt": None}, "startedAt"),
    ],
    ids=repr,
)
def test_turn_start_checks_its_turn_state(turn, key):
    _rejects(_good("turn-start", turn=turn), key)


@pytest.mark.parametrize(
    "state,key",
    [
        ("x", "SessionState"),
        (None, "SessionState"),
        ({**SS, "revision": -1}, "revision"),
        ({**SS, "revision": True}, "revision"),
        ({**SS, "revision": "1"}, "revision"),
        ({**SS, "sessionId": 1}, "sessionId"),
        ({"revision": 1, "data": None}, "sessionId"),
    ],
    ids=repr,
)
def test_session_state_part_checks_its_state(state, key):
    _rejects(_good("session-state", state=state), key)


def test_finish_reasons_are_checked_only_on_turn_finish():
    for reason in FINISH_REASONS:
        assert part_from_dict(_good("turn-finish", finishReason=reason)).finish_reason == reason
    # A step's finish reason is the driver's (e.g. "tool-calls"), not the turn's.
    assert part_from_dict(_good("step-finish", finishReason="tool-calls")).finish_reason == "tool-calls"


@pytest.mark.parametrize(
    "cls,value,key",
    [
        (TurnState, [], "TurnState"),
        (TurnState, {**TS, "agentId": None}, "agentId"),
        (SessionState, {"sessionId": "s"}, "revision"),
        (SessionState, {"sessionId": "s", "revision": 1.5}, "revision"),
        (
            HelloResult,
            {"agentId": "a", "bridgeId": "b", "instance": "i", "protocol": 1, "pid": -1, "startedAt": "t"},
            "pid",
        ),
        (
            HelloResult,
            {"agentId": "a", "bridgeId": "b", "instance": "i", "protocol": "1", "pid": 1, "startedAt": "t"},
            "protocol",
        ),
        (
            HelloResult,
            {"agentId": "a", "bridgeId": "b", "protocol": 1, "pid": 1, "startedAt": "t"},
            "instance",
        ),
        (StartTurnResult, {"turnId": "t", "status": "done"}, "status"),
        (StartTurnResult, {"turnId": "t"}, "status"),
        (StartTurnResult, {"turnId": 1, "status": "started"}, "turnId"),
    ],
    ids=repr,
)
def test_states_and_results_reject_bad_fields(cls, value, key):
    with pytest.raises(ProtocolError) as info:
        cls.from_dict(value)
    assert key in str(info.value)


@pytest.mark.parametrize("cls", [Part, TextDelta, TurnState, SessionState, HelloResult, StartTurnResult])
@pytest.mark.parametrize("text", ["", "{", "not json", '{"a":'])
def test_from_json_of_non_json_is_a_protocol_error(cls, text):
    with pytest.raises(ProtocolError):
        cls.from_json(text)


@pytest.mark.parametrize("cls", [Part, TurnState, SessionState, HelloResult, StartTurnResult])
def test_from_json_of_a_non_object_is_a_protocol_error(cls):
    for text in ("[]", "1", "null", '"x"'):
        with pytest.raises(ProtocolError):
            cls.from_json(text)


@settings(max_examples=300)
@given(
    json_values
    | st.fixed_dictionaries(
        {"type": st.sampled_from(sorted(PART_TYPES))},
        optional={
            k: json_values
            for k in [
                "index",
                "step",
                "attempt",
                "text",
                "turn",
                "state",
                "toolCallId",
                "toolName",
                "isError",
                "finishReason",
                "discardedAttempt",
                "reason",
                "toolCallIds",
                "name",
                "error",
            ]
        },
    )
)
def test_part_from_dict_raises_nothing_but_protocol_error(value):
    # An unhashable "type" is the known bug tested (xfail) above; keep this property to the rest.
    assume(not (isinstance(value, dict) and isinstance(value.get("type"), (list, dict))))
    try:
        part = part_from_dict(value)
    except ProtocolError:
        return
    assert part_from_dict(part.to_dict()) == part


# ----------------------------------------------------------------------------- dataclasses-json


@pytest.mark.parametrize(
    "value",
    [
        SessionState("s", 2, {"a": [1, 2]}),
        TurnState(1, "a", "b", "s", "t", "p", "2024"),
        HelloResult("a", "b", "i", 1, 42, "2024"),
        StartTurnResult("t", "started"),
    ],
    ids=lambda v: type(v).__name__,
)
def test_schema_dumps_and_loads_states_like_to_dict(value):
    schema = type(value).schema()
    assert schema.dump(value) == value.to_dict()
    assert schema.load(value.to_dict()) == value
    assert schema.loads(value.to_json()) == value


def test_schema_loads_parts_from_camel_case():
    assert TextDelta.schema().load({"index": 1, "step": 0, "attempt": 1, "text": "hi"}) == TextDelta(
        1, 0, 1, "hi"
    )
    tr = ToolResult(1, 0, 2, "c", "n", {"x": [1]}, True)
    assert ToolResult.schema().load(ToolResult.schema().dump(tr)) == tr
    ts = TurnState(1, "a", "b", "s", "t", "p", "x")
    assert TurnStart.schema().load(TurnStart.schema().dump(TurnStart(0, None, 1, ts))) == TurnStart(
        0, None, 1, ts
    )


def test_states_and_parts_are_frozen():
    s = SessionState("s", 1, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.revision = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        TextDelta(1, 0, 1, "x").text = "y"  # type: ignore[misc]


@pytest.mark.parametrize("value", [2**53, 2**63, 2**70])
def test_integers_past_the_json_safe_range_are_protocol_errors(value):
    with pytest.raises(ProtocolError, match="2\\*\\*53-1"):
        SessionState.from_dict({"sessionId": "s", "revision": value, "data": None})
    with pytest.raises(ProtocolError):
        part_from_dict({"type": "step-start", "index": value, "step": 0, "attempt": 1})


@pytest.mark.parametrize(
    "kind,changes,word",
    [
        ("approval-request", {"choices": []}, "choices"),
        ("approval-request", {"choices": ["maybe"]}, "choices"),
        ("approval-answer", {"decision": "yes"}, "decision"),
        ("approval-answer", {"by": "someone"}, "by"),
    ],
)
def test_c18_approval_parts_refuse_unknown_choices(kind, changes, word):
    _rejects(_good(kind, **changes), word)


def test_c18_approval_request_renders_what_the_agent_wants_to_run():
    request = ApprovalRequest(1, 0, 1, "r1", "c", "shell", {"command": "rm -rf <b>"}, ("deny",), "x & y")
    html = request._repr_html_()
    assert "shell" in html and "rm -rf &lt;b&gt;" in html and "x &amp; y" in html
    assert "<b>" not in html.split("</b>", 1)[1]  # only our own markup is markup


class _OldPickle:
    """Pickles as a part did before the classes had slots: the class and its ``__dict__``."""

    def __init__(self, cls, state):
        self.cls, self.state = cls, state

    def __reduce_ex__(self, protocol):
        import copyreg

        return copyreg._reconstructor, (self.cls, object, None), self.state


# What the previous release's pickle.dumps([TextDelta(3, 1, 1, "hi"), SessionState("s", 2, {"a": 1})]) gave.
_RELEASED = (
    b"\x80\x04\x95\xaa\x00\x00\x00\x00\x00\x00\x00]\x94(\x8c\x18bridge_client.wire.parts\x94\x8c"
    b"\tTextDelta\x94\x93\x94)\x81\x94}\x94(\x8c\x05index\x94K\x03\x8c\x04step\x94K\x01\x8c\x07a"
    b"ttempt\x94K\x01\x8c\x04text\x94\x8c\x02hi\x94ubh\x01\x8c\x0cSessionState\x94\x93\x94)\x81"
    b"\x94}\x94(\x8c\nsession_id\x94\x8c\x01s\x94\x8c\x08revision\x94K\x02\x8c\x04data\x94}\x94"
    b"\x8c\x01a\x94K\x01sube."
)


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_parts_pickled_before_slots_load_with_their_values(protocol):
    # A part or state pickled by the previous release (a plain frozen dataclass: the state is
    # its __dict__) loads with its own values, not its field names.
    delta = {"index": 3, "step": 1, "attempt": 2, "text": "hi"}
    state = {"session_id": "s", "revision": 4, "data": {"a": [1]}}
    old = pickle.dumps([_OldPickle(TextDelta, delta), _OldPickle(SessionState, state)], protocol)
    assert pickle.loads(old) == [TextDelta(3, 1, 2, "hi"), SessionState("s", 4, {"a": [1]})]


def test_parts_pickled_by_the_previous_release_load_with_their_values():
    assert pickle.loads(_RELEASED) == [TextDelta(3, 1, 1, "hi"), SessionState("s", 2, {"a": 1})]

"""The RPC envelope (PROTOCOL.md, "Envelope"): every message encodes to the shape the
protocol gives and decodes back; every malformed frame raises FrameError (a ProtocolError)
naming the field, and nothing else ever escapes the decoder (B08)."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge_client.errors import HarnessError, ProtocolError
from bridge_client.wire import frames
from bridge_client.wire.frames import (
    Ack,
    Chunk,
    Defect,
    Die,
    Eof,
    Exit,
    Fail,
    Failure,
    FrameError,
    Interrupt,
    Interrupted,
    Ping,
    Pong,
    Request,
    Success,
    bridge_message,
    decode_bridge,
    decode_host,
    encode,
    encode_chunk_raw,
    host_message,
    parse_frame,
)

HOST_MESSAGES = [
    Request(1, "Hello", None, ()),
    Request(0, "Hello"),
    Request(
        "req-1",
        "StartTurn",
        {"sessionId": "s", "turnId": "t", "prompt": "héllo ✓"},
        (("traceparent", "00-1"),),
    ),
    Request(2**53, "ReadTurn", {"offset": 3}, (("a", "1"), ("b", ""))),
    Ack(7),
    Ack("7"),
    Interrupt(3),
    Interrupt("x"),
    Ping(),
    Eof(),
]

BRIDGE_MESSAGES = [
    Chunk(1, [{"type": "text-delta", "text": "hi"}]),
    Chunk("r", [1, "two", None, [3], {"four": 4.5}]),
    Exit(1, Success(None)),
    Exit("x", Success({"sessionId": "s", "revision": 1, "data": None})),
    Exit(2, Failure((Fail({"_tag": "BadRequest", "message": "no"}),))),
    Exit(3, Failure((Die("boom"),))),
    Exit(4, Failure((Interrupted(None),))),
    Exit(
        5,
        Failure(
            (Fail({"_tag": "TurnNotFound", "message": "m", "turnId": "t"}), Die({"x": 1}), Interrupted())
        ),
    ),
    Exit(6, Failure(())),
    Defect("bad frame"),
    Defect({"message": "x"}),
    Defect(None),
    Pong(),
]

# The exact JSON objects PROTOCOL.md gives for each message.
WIRE_SHAPES = [
    (Request(1, "Hello"), {"_tag": "Request", "id": 1, "tag": "Hello", "payload": None, "headers": []}),
    (
        Request("a", "X", {"k": 1}, (("h", "v"),)),
        {"_tag": "Request", "id": "a", "tag": "X", "payload": {"k": 1}, "headers": [["h", "v"]]},
    ),
    (Ack(1), {"_tag": "Ack", "requestId": 1}),
    (Interrupt("1"), {"_tag": "Interrupt", "requestId": "1"}),
    (Ping(), {"_tag": "Ping"}),
    (Eof(), {"_tag": "Eof"}),
    (Chunk(1, [1, 2]), {"_tag": "Chunk", "requestId": 1, "values": [1, 2]}),
    (Exit(1, Success()), {"_tag": "Exit", "requestId": 1, "exit": {"_tag": "Success", "value": None}}),
    (
        Exit(2, Failure((Fail({"_tag": "E"}), Die("d"), Interrupted()))),
        {
            "_tag": "Exit",
            "requestId": 2,
            "exit": {
                "_tag": "Failure",
                "cause": [
                    {"_tag": "Fail", "error": {"_tag": "E"}},
                    {"_tag": "Die", "defect": "d"},
                    {"_tag": "Interrupt", "fiberId": None},
                ],
            },
        },
    ),
    (Defect("x"), {"_tag": "Defect", "defect": "x"}),
    (Pong(), {"_tag": "Pong"}),
]


def _raises_frame_error(fn, *args) -> FrameError:
    with pytest.raises(FrameError) as info:
        fn(*args)
    assert isinstance(info.value, ProtocolError)
    return info.value


# ----------------------------------------------------------------------------- encoding


@pytest.mark.parametrize(
    "message,shape", WIRE_SHAPES, ids=lambda v: type(v).__name__ if not isinstance(v, dict) else ""
)
def test_encode_gives_the_protocol_shape(message, shape):
    text = encode(message)
    assert json.loads(text) == shape
    assert isinstance(text, str)
    assert ": " not in text and ", " not in text  # compact: one frame, no padding


def test_request_always_carries_payload_and_headers():
    obj = json.loads(encode(Request(9, "Hello")))
    assert "payload" in obj and obj["payload"] is None
    assert "headers" in obj and obj["headers"] == []


def test_success_always_carries_value_even_when_null():
    obj = json.loads(encode(Exit(1, Success())))
    assert "value" in obj["exit"] and obj["exit"]["value"] is None


def test_encode_keeps_non_ascii_text_as_utf8():
    text = encode(Request(1, "StartTurn", {"prompt": "é✓"}))
    assert "é✓" in text


def test_encode_refuses_non_messages_and_non_json_values():
    with pytest.raises(TypeError):
        encode({"_tag": "Ping"})  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        encode(Request(1, "X", float("nan")))
    with pytest.raises(TypeError):
        encode(Request(1, "X", {1, 2}))


# ----------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("message", HOST_MESSAGES, ids=repr)
def test_host_messages_round_trip(message):
    assert decode_host(encode(message)) == [message]


@pytest.mark.parametrize("message", BRIDGE_MESSAGES, ids=repr)
def test_bridge_messages_round_trip(message):
    assert decode_bridge(encode(message)) == [message]


@pytest.mark.parametrize("message", HOST_MESSAGES, ids=repr)
def test_host_messages_round_trip_through_binary_frames(message):
    data = encode(message).encode("utf-8")
    assert decode_host(data) == [message]
    assert decode_host(bytearray(data)) == [message]
    assert decode_host(memoryview(data)) == [message]


@pytest.mark.parametrize("message", BRIDGE_MESSAGES, ids=repr)
def test_bridge_messages_round_trip_through_binary_frames(message):
    assert decode_bridge(encode(message).encode("utf-8")) == [message]


def test_binary_frame_with_multibyte_utf8_is_read_like_text():
    text = '{"_tag":"Request","id":1,"tag":"StartTurn","payload":{"prompt":"日本語 ✓ é"},"headers":[]}'
    assert decode_host(text.encode("utf-8")) == decode_host(text)
    assert decode_host(text.encode("utf-8"))[0].payload == {"prompt": "日本語 ✓ é"}


@pytest.mark.parametrize(
    "make",
    [
        lambda i: Request(i, "Hello"),
        lambda i: Ack(i),
        lambda i: Interrupt(i),
    ],
    ids=["Request", "Ack", "Interrupt"],
)
@pytest.mark.parametrize("request_id", [1, "1", 0, "0", -5, "abc", 2**60])
def test_host_ids_keep_their_json_type(make, request_id):
    (decoded,) = decode_host(encode(make(request_id)))
    got = decoded.id if isinstance(decoded, Request) else decoded.request_id
    assert got == request_id and type(got) is type(request_id)


@pytest.mark.parametrize(
    "make",
    [lambda i: Chunk(i, [1]), lambda i: Exit(i, Success(None))],
    ids=["Chunk", "Exit"],
)
@pytest.mark.parametrize("request_id", [1, "1", 0, "0", "abc", 2**60])
def test_bridge_ids_keep_their_json_type(make, request_id):
    text = encode(make(request_id))
    assert json.loads(text)["requestId"] == request_id
    assert type(json.loads(text)["requestId"]) is type(request_id)
    (decoded,) = decode_bridge(text)
    assert decoded.request_id == request_id and type(decoded.request_id) is type(request_id)


def test_numeric_and_string_ids_stay_distinct():
    (as_int,) = decode_bridge('{"_tag":"Exit","requestId":1,"exit":{"_tag":"Success","value":null}}')
    (as_str,) = decode_bridge('{"_tag":"Exit","requestId":"1","exit":{"_tag":"Success","value":null}}')
    assert as_int != as_str


# ----------------------------------------------------------------------------- batches


def test_a_batch_array_gives_every_message_in_order():
    batch = "[" + ",".join(encode(m) for m in HOST_MESSAGES) + "]"
    assert parse_frame(batch) == [json.loads(encode(m)) for m in HOST_MESSAGES]
    assert decode_host(batch) == HOST_MESSAGES
    assert decode_host(batch.encode()) == HOST_MESSAGES


def test_a_bridge_batch_gives_every_message_in_order():
    batch = "[" + ",".join(encode(m) for m in BRIDGE_MESSAGES) + "]"
    assert decode_bridge(batch) == BRIDGE_MESSAGES


def test_a_single_object_frame_is_a_batch_of_one():
    assert parse_frame('{"_tag":"Ping"}') == [{"_tag": "Ping"}]


def test_a_batch_with_one_bad_message_is_rejected():
    batch = '[{"_tag":"Ping"},{"_tag":"Nope"}]'
    err = _raises_frame_error(decode_host, batch)
    assert "_tag" in str(err) and "Nope" in str(err)


def test_a_batch_item_that_is_not_an_object_is_rejected():
    err = _raises_frame_error(decode_host, '[{"_tag":"Ping"}, 3]')
    assert "object" in str(err)
    err = _raises_frame_error(decode_bridge, '[{"_tag":"Pong"}, "x"]')
    assert "object" in str(err)


# ----------------------------------------------------------------------------- rejections: the frame


def test_not_utf8_is_rejected():
    err = _raises_frame_error(parse_frame, b'{"_tag":"Ping","x":"\xff\xfe"}')
    assert "UTF-8" in str(err)
    assert err.request_id is None


@pytest.mark.parametrize(
    "text", ["{", "", "   ", "nope", '{"_tag":"Ping"', "{'_tag':'Ping'}", '{"a":1} {"b":2}']
)
def test_not_json_is_rejected(text):
    err = _raises_frame_error(parse_frame, text)
    assert "JSON" in str(err)
    _raises_frame_error(parse_frame, text.encode())


@pytest.mark.parametrize("text", ["1", "1.5", '"Ping"', "null", "true", "false"])
def test_a_scalar_frame_is_rejected(text):
    err = _raises_frame_error(parse_frame, text)
    assert "object" in str(err)
    _raises_frame_error(decode_host, text)
    _raises_frame_error(decode_bridge, text)


def test_an_empty_array_is_rejected():
    err = _raises_frame_error(parse_frame, "[]")
    assert "non-empty" in str(err)
    _raises_frame_error(decode_bridge, b"[]")


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, '{"a":' * 100_000 + "1" + "}" * 100_000])
def test_deeply_nested_json_is_a_frame_error_not_a_recursion_error(text):
    with pytest.raises(ProtocolError):
        parse_frame(text)


# ----------------------------------------------------------------------------- rejections: messages


@pytest.mark.parametrize("decode", [host_message, bridge_message], ids=["host", "bridge"])
@pytest.mark.parametrize("value", [None, 1, "Ping", [], [{"_tag": "Ping"}], True])
def test_a_message_must_be_an_object(decode, value):
    err = _raises_frame_error(decode, value)
    assert "object" in str(err)


@pytest.mark.parametrize(
    "obj",
    [
        {"_tag": "Nope"},
        {},
        {"_tag": None},
        {"_tag": 1},
        {"_tag": "request"},
        {"_tag": "Chunk", "requestId": 1, "values": [1]},
    ],
)
def test_host_message_with_unknown_tag_is_rejected(obj):
    err = _raises_frame_error(host_message, obj)
    assert "_tag" in str(err)
    assert repr(obj.get("_tag")) in str(err)


@pytest.mark.parametrize(
    "obj",
    [
        {"_tag": "Nope"},
        {},
        {"_tag": "Ping"},
        {"_tag": "Request", "id": 1, "tag": "X", "payload": None, "headers": []},
    ],
)
def test_bridge_message_with_unknown_tag_is_rejected(obj):
    err = _raises_frame_error(bridge_message, obj)
    assert "_tag" in str(err)
    assert repr(obj.get("_tag")) in str(err)


def _request(**changes):
    obj = {"_tag": "Request", "id": 1, "tag": "Hello", "payload": None, "headers": []}
    obj.update(changes)
    return {k: v for k, v in obj.items() if v is not _MISSING}


class _Missing:
    """A key left out of a frame; its repr is the same in every process (the test ids of
    pytest-xdist's workers must match)."""

    def __repr__(self) -> str:
        return "MISSING"


_MISSING = _Missing()


def test_request_without_payload_is_rejected_with_its_id():
    err = _raises_frame_error(host_message, _request(id="r1", payload=_MISSING))
    assert "Request.payload" in str(err)
    assert err.request_id == "r1"


def test_request_with_null_payload_is_accepted():
    assert host_message(_request(payload=None)).payload is None


def test_request_without_headers_is_rejected_with_its_id():
    err = _raises_frame_error(host_message, _request(id=4, headers=_MISSING))
    assert "Request.headers" in str(err)
    assert err.request_id == 4 and type(err.request_id) is int


@pytest.mark.parametrize(
    "headers",
    [
        None,
        {},
        "a=b",
        [["a"]],
        [["a", "b", "c"]],
        [["a", 1]],
        [[1, "b"]],
        ["ab"],
        [("a", "b"), None],
        [[None, None]],
        [{"a": "b"}],
    ],
    ids=repr,
)
def test_request_headers_must_be_string_pairs(headers):
    err = _raises_frame_error(host_message, _request(id="h", headers=headers))
    assert "Request.headers" in str(err)
    assert err.request_id == "h"


def test_request_headers_decode_to_tuples_of_pairs():
    msg = host_message(_request(headers=[["a", "1"], ["b", ""]]))
    assert msg.headers == (("a", "1"), ("b", ""))


@pytest.mark.parametrize("tag", [_MISSING, None, "", 1, ["Hello"]], ids=repr)
def test_request_tag_must_be_a_non_empty_string(tag):
    err = _raises_frame_error(host_message, _request(id=8, tag=tag))
    assert "Request.tag" in str(err)
    assert err.request_id == 8


BAD_IDS = [True, False, 1.0, 1.5, -0.0, None, [1], {"id": 1}, _MISSING]


@pytest.mark.parametrize("bad", BAD_IDS, ids=repr)
def test_request_id_must_be_an_integer_or_a_string(bad):
    err = _raises_frame_error(host_message, _request(id=bad))
    assert "Request.id" in str(err)
    assert err.request_id is None


@pytest.mark.parametrize("tag", ["Ack", "Interrupt"])
@pytest.mark.parametrize("bad", BAD_IDS, ids=repr)
def test_ack_and_interrupt_request_id_must_be_an_integer_or_a_string(tag, bad):
    obj = {"_tag": tag}
    if bad is not _MISSING:
        obj["requestId"] = bad
    err = _raises_frame_error(host_message, obj)
    assert f"{tag}.requestId" in str(err)
    assert err.request_id is None


@pytest.mark.parametrize("bad", BAD_IDS, ids=repr)
def test_chunk_and_exit_request_id_must_be_an_integer_or_a_string(bad):
    for obj in (
        {"_tag": "Chunk", "values": [1]},
        {"_tag": "Exit", "exit": {"_tag": "Success", "value": None}},
    ):
        if bad is not _MISSING:
            obj["requestId"] = bad
        err = _raises_frame_error(bridge_message, obj)
        assert f"{obj['_tag']}.requestId" in str(err)
        assert err.request_id is None


@pytest.mark.parametrize("values", [[], None, {}, "abc", 1, _MISSING], ids=repr)
def test_chunk_values_must_be_a_non_empty_array(values):
    obj = {"_tag": "Chunk", "requestId": "c", "values": values}
    if values is _MISSING:
        del obj["values"]
    err = _raises_frame_error(bridge_message, obj)
    assert "Chunk.values" in str(err)
    assert err.request_id == "c"


BAD_EXITS = [
    (_MISSING, "Exit.exit"),
    (None, "Exit.exit"),
    ("Success", "Exit.exit"),
    ([{"_tag": "Success"}], "Exit.exit"),
    ({}, "exit _tag"),
    ({"_tag": "Ok", "value": 1}, "exit _tag"),
    ({"_tag": "Failure"}, "Failure.cause"),
    ({"_tag": "Failure", "cause": None}, "Failure.cause"),
    ({"_tag": "Failure", "cause": {"_tag": "Die", "defect": 1}}, "Failure.cause"),
    ({"_tag": "Failure", "cause": ["boom"]}, "Failure.cause"),
    ({"_tag": "Failure", "cause": [None]}, "Failure.cause"),
    ({"_tag": "Failure", "cause": [{"_tag": "Oops"}]}, "cause _tag"),
    ({"_tag": "Failure", "cause": [{}]}, "cause _tag"),
    ({"_tag": "Failure", "cause": [{"_tag": "Fail"}]}, "Fail.error"),
    ({"_tag": "Failure", "cause": [{"_tag": "Die", "defect": 1}, {"_tag": "Fail"}]}, "Fail.error"),
]


@pytest.mark.parametrize(
    "exit_value,field", BAD_EXITS, ids=lambda v: repr(v) if not isinstance(v, str) else v
)
@pytest.mark.parametrize("request_id", [5, "e5"])
def test_bad_exit_and_cause_shapes_are_rejected_with_the_request_id(exit_value, field, request_id):
    obj = {"_tag": "Exit", "requestId": request_id, "exit": exit_value}
    if exit_value is _MISSING:
        del obj["exit"]
    err = _raises_frame_error(bridge_message, obj)
    assert field in str(err)
    assert err.request_id == request_id and type(err.request_id) is type(request_id)


def test_frame_error_is_a_protocol_error_and_a_value_error():
    err = FrameError("x", 3)
    assert isinstance(err, ProtocolError) and isinstance(err, HarnessError) and isinstance(err, ValueError)
    assert err.request_id == 3 and str(err) == "x"
    assert FrameError("y").request_id is None
    assert not FrameError("y").retryable


# ----------------------------------------------------------------------------- encode_chunk_raw


def test_encode_chunk_raw_decodes_to_the_same_values():
    values = [{"type": "text-delta", "text": "é ✓"}, 1, None, [1, 2], "s"]
    raw = [json.dumps(v, ensure_ascii=False) for v in values]
    for request_id in (3, "3"):
        text = encode_chunk_raw(request_id, raw)
        assert decode_bridge(text) == [Chunk(request_id, values)]
        assert json.loads(text) == json.loads(encode(Chunk(request_id, values)))
        assert decode_bridge(text.encode()) == [Chunk(request_id, values)]


def test_encode_chunk_raw_refuses_an_empty_chunk():
    with pytest.raises(ValueError):
        encode_chunk_raw(1, [])


# ----------------------------------------------------------------------------- properties

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**64), max_value=2**64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=16,
)

_KEYS = [
    "_tag",
    "id",
    "tag",
    "payload",
    "headers",
    "requestId",
    "values",
    "exit",
    "cause",
    "error",
    "defect",
    "value",
    "fiberId",
]
_TAGS = [
    "Request",
    "Ack",
    "Interrupt",
    "Ping",
    "Eof",
    "Chunk",
    "Exit",
    "Defect",
    "Pong",
    "Success",
    "Failure",
    "Fail",
    "Die",
    "Nope",
]

# Objects shaped like envelope messages (known keys and tags, wrong or right values) reach
# deeper into the decoders than arbitrary JSON does.
envelope_like = st.recursive(
    json_scalars | st.sampled_from(_TAGS),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(_KEYS), inner, max_size=6)
        | st.fixed_dictionaries({"_tag": st.sampled_from(_TAGS)}, optional={k: inner for k in _KEYS[1:]})
    ),
    max_leaves=24,
)
any_json = json_values | envelope_like

ids = st.integers(min_value=-(2**63), max_value=2**63) | st.text(max_size=10)
host_messages = st.one_of(
    st.builds(
        Request,
        ids,
        st.text(min_size=1, max_size=10),
        json_values,
        st.lists(st.tuples(st.text(max_size=5), st.text(max_size=5)), max_size=3).map(tuple),
    ),
    st.builds(Ack, ids),
    st.builds(Interrupt, ids),
    st.just(Ping()),
    st.just(Eof()),
)
causes = st.one_of(
    st.builds(Fail, json_values), st.builds(Die, json_values), st.builds(Interrupted, json_values)
)
bridge_messages = st.one_of(
    st.builds(Chunk, ids, st.lists(json_values, min_size=1, max_size=4)),
    st.builds(
        Exit,
        ids,
        st.builds(Success, json_values) | st.builds(Failure, st.lists(causes, max_size=3).map(tuple)),
    ),
    st.builds(Defect, json_values),
    st.just(Pong()),
)


def _only_protocol_errors(fn, value):
    try:
        return fn(value)
    except ProtocolError:
        return None


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(any_json)
def test_decoders_raise_nothing_but_protocol_error_for_any_json_value(value):
    host = _only_protocol_errors(host_message, value)
    bridge = _only_protocol_errors(bridge_message, value)
    # Whatever is accepted survives a round trip unchanged.
    if host is not None:
        assert host_message(json.loads(encode(host))) == host
    if bridge is not None:
        assert bridge_message(json.loads(encode(bridge))) == bridge


@settings(max_examples=400)
@given(st.text() | any_json.map(lambda v: json.dumps(v)) | st.binary())
def test_frame_decoders_raise_nothing_but_protocol_error_for_any_text_or_bytes(data):
    _only_protocol_errors(parse_frame, data)
    _only_protocol_errors(decode_host, data)
    _only_protocol_errors(decode_bridge, data)


@settings(max_examples=200)
@given(st.lists(host_messages, min_size=1, max_size=4))
def test_any_host_batch_round_trips(messages):
    text = "[" + ",".join(encode(m) for m in messages) + "]"
    assert decode_host(text) == messages
    assert decode_host(text.encode("utf-8")) == messages


@settings(max_examples=200)
@given(st.lists(bridge_messages, min_size=1, max_size=4))
def test_any_bridge_batch_round_trips(messages):
    text = "[" + ",".join(encode(m) for m in messages) + "]"
    assert decode_bridge(text) == messages


@settings(max_examples=200)
@given(ids, st.lists(json_values, min_size=1, max_size=5))
def test_encode_chunk_raw_matches_encode_for_any_values(request_id, values):
    raw = [json.dumps(v) for v in values]
    assert decode_bridge(encode_chunk_raw(request_id, raw)) == [Chunk(request_id, values)]


def test_module_exports_the_documented_api():
    assert set(frames.__all__) >= {
        "encode",
        "encode_chunk_raw",
        "parse_frame",
        "host_message",
        "bridge_message",
        "FrameError",
    }


def test_effect_client_protocol_error_reads_as_a_defect():
    (message,) = decode_bridge(
        '{"_tag":"ClientProtocolError","error":{"_tag":"RpcClientError","message":"bad"}}'
    )
    assert isinstance(message, Defect)
    assert message.defect == {"_tag": "RpcClientError", "message": "bad"}

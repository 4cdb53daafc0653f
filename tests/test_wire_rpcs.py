"""The RPC catalogue (PROTOCOL.md, "Catalogue"): the rows say what the protocol says, ids are
safe to use as file names and keys, and every payload check answers BadRequest (B08)."""
from __future__ import annotations

import os
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge_client.errors import BadRequest, HarnessError, RpcError, rpc_error_from_wire
from bridge_client.wire import portable as _portable  # noqa: F401  (its rows join the catalogue)
from bridge_client.wire import rpcs
from bridge_client.wire.parts import SessionState
from bridge_client.wire.rpcs import (
    CANCEL_TURN,
    CATALOGUE,
    CLOSE_SESSION,
    HELLO,
    MAX_ID_LENGTH,
    MAX_PROMPT_BYTES,
    OPEN_SESSION,
    READ_TURN,
    START_TURN,
    check_id,
)

# Transcribed from PROTOCOL.md, "Catalogue (protocol 1)": tag -> (stream, resend, typed errors).
DESIGNED = {
    "Hello": (False, True, ()),
    "OpenSession": (False, True, ("BadRequest",)),
    "StartTurn": (False, True, ("SessionNotFound", "TurnConflict", "BadRequest")),
    "ReadTurn": (True, True, ("SessionNotFound", "TurnNotFound", "BadRequest")),
    "CancelTurn": (False, True, ("TurnNotFound",)),
    "CloseSession": (False, True, ("SessionNotFound",)),
}
# Interactive turns (issue 13; docs/protocol.md, which wins where PROTOCOL.md is older).
EXPECTED = {
    **DESIGNED,
    "OpenSession": (False, True, ("BadRequest", "ApprovalsUnsupported", "ToolsUnsupported")),
    "AnswerApproval": (
        False,
        True,
        ("TurnNotFound", "ApprovalNotFound", "ApprovalExpired", "ApprovalConflict", "BadRequest"),
    ),
    "SendMessage": (False, True, ("TurnNotFound", "TurnNotRunning", "MessagesUnsupported", "BadRequest")),
    "ClaimHostTool": (False, True, ("TurnNotFound", "HostToolCallNotFound", "BadRequest")),
    "AnswerHostTool": (False, True, ("TurnNotFound", "HostToolCallNotFound", "BadRequest")),
    # Portable sessions (issue 31; docs/protocol.md, "Moving a session").
    "ExportSession": (False, True, ("SessionNotFound", "SessionMoved")),
    "ImportSession": (
        False,
        True,
        ("ExportDamaged", "ExportUnsupported", "DriverMismatch", "RestoreConflict", "BadRequest"),
    ),
    "MoveSession": (False, True, ("SessionNotFound", "BadRequest")),
}

PROTOCOL_MD = os.environ.get("BRIDGE_CLIENT_PROTOCOL_MD", "/work/shared/design/PROTOCOL.md")


def test_catalogue_rows_match_the_protocol():
    assert set(CATALOGUE) == set(EXPECTED)
    for tag, (stream, resend, errors) in EXPECTED.items():
        rpc = CATALOGUE[tag]
        assert rpc.tag == tag
        assert rpc.stream is stream, tag
        assert rpc.resend is resend, tag
        assert set(rpc.errors) == set(errors), tag


def test_named_constants_are_the_catalogue_rows():
    assert [HELLO, OPEN_SESSION, START_TURN, READ_TURN, CANCEL_TURN, CLOSE_SESSION] == [
        CATALOGUE[t] for t in ("Hello", "OpenSession", "StartTurn", "ReadTurn", "CancelTurn", "CloseSession")
    ]
    assert rpcs.lookup("ReadTurn") is READ_TURN
    assert rpcs.lookup("Nope") is None
    assert rpcs.lookup("readturn") is None


def test_only_read_turn_streams():
    assert [rpc.tag for rpc in CATALOGUE.values() if rpc.stream] == ["ReadTurn"]


@pytest.mark.parametrize("tag", sorted(EXPECTED))
def test_every_typed_error_has_its_own_class(tag):
    for name in CATALOGUE[tag].errors:
        exc = rpc_error_from_wire({"_tag": name, "message": "m"})
        assert type(exc) is not RpcError and exc.tag == name
        assert isinstance(exc, RpcError) and not exc.retryable


@pytest.mark.skipif(not os.path.exists(PROTOCOL_MD), reason="design docs not on this machine")
def test_catalogue_matches_the_table_in_protocol_md():
    with open(PROTOCOL_MD, encoding="utf-8") as f:
        text = f.read()
    section = text.split("## Catalogue", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        m = re.fullmatch(r"`(\w+)`", cells[0])
        if not m:
            continue
        errors = tuple(re.findall(r"`(\w+)`", cells[5]))
        rows[m.group(1)] = (cells[3] == "yes", cells[4] == "yes", errors)
    assert rows == DESIGNED


# ----------------------------------------------------------------------------- check_id

GOOD_IDS = [
    "a",
    "A",
    "0",
    "s-1",
    "turn_2",
    "x.y",
    "user@host:1",
    "a..b",
    "a" * MAX_ID_LENGTH,
    "9f3c-uuid-like",
]
BAD_IDS = [
    "",
    "../x",
    "..",
    ".",
    "a/b",
    "/abs",
    "a\\b",
    "./a",
    ".hidden",
    "-x",
    "_x",
    "@x",
    ":x",
    "a b",
    " a",
    "a\n",
    "a\r",
    "a\t",
    "a\x00",
    "a" * (MAX_ID_LENGTH + 1),
    "%2e%2e",
    "a%2fb",
    "~",
    "a*",
    "a?",
    "a;b",
    "é",
    "ａ",  # fullwidth a
    "\u0430",  # Cyrillic a
    "a\u200b",  # zero-width space
    "a\u2215b",  # division slash
    "a\uff0fb",  # fullwidth solidus
    "a\u0301",  # combining accent
    "\u212a",  # Kelvin sign (case-folds to k)
    "a\ud800",  # lone surrogate
]


@pytest.mark.parametrize("value", GOOD_IDS)
def test_check_id_accepts_plain_ids(value):
    assert check_id(value, "turnId") == value


@pytest.mark.parametrize("value", BAD_IDS, ids=repr)
def test_check_id_rejects_unsafe_ids(value):
    with pytest.raises(BadRequest) as info:
        check_id(value, "turnId")
    assert "turnId" in str(info.value)


@pytest.mark.parametrize("value", [None, 1, 1.5, True, b"ab", ["a"], {"a": 1}], ids=repr)
def test_check_id_rejects_non_strings(value):
    with pytest.raises(BadRequest) as info:
        check_id(value, "sessionId")
    assert "sessionId" in str(info.value)


@settings(max_examples=500)
@given(st.text(max_size=MAX_ID_LENGTH + 4))
def test_every_accepted_id_is_a_safe_file_name(value):
    try:
        check_id(value, "id")
    except BadRequest:
        return
    assert 1 <= len(value) <= MAX_ID_LENGTH
    assert value.isascii() and value.isprintable()
    assert "/" not in value and "\\" not in value and value not in (".", "..") and not value.startswith(".")
    assert os.path.basename(value) == value and os.path.normpath(value) == value


def test_bad_request_is_a_typed_rpc_error():
    with pytest.raises(BadRequest) as info:
        check_id("../x", "sessionId")
    exc = info.value
    assert isinstance(exc, RpcError) and isinstance(exc, HarnessError)
    assert exc.to_wire()["_tag"] == "BadRequest"
    assert isinstance(exc.to_wire()["message"], str)


# ----------------------------------------------------------------------------- payloads

SS = {"sessionId": "s1", "revision": 3, "data": {"k": 1}}
NO_INTERACTIVE = {"approvals": False, "approval_timeout": None}


def _open(state=None, env=None, interactive=NO_INTERACTIVE):
    return {"session_id": "s1", "state": state, "env": env or {}, "interactive": interactive}


GOOD_PAYLOADS = [
    (HELLO, None, {}),
    (OPEN_SESSION, {"sessionId": "s1", "state": None}, _open()),
    (OPEN_SESSION, {"sessionId": "s1"}, _open()),
    (
        OPEN_SESSION,
        {"sessionId": "s1", "state": SS},
        _open(SessionState("s1", 3, {"k": 1})),
    ),
    (
        OPEN_SESSION,
        {"sessionId": "s1", "state": None, "env": {"FOO": "x", "_B2": ""}},
        _open(env={"FOO": "x", "_B2": ""}),
    ),
    (
        OPEN_SESSION,
        {"sessionId": "s1", "interactive": {"approvals": True, "approvalTimeout": 2}},
        _open(
            interactive={"approvals": True, "approval_timeout": 2.0, "host_tools": None, "tool_timeout": None}
        ),
    ),
    (
        OPEN_SESSION,
        {"sessionId": "s1", "interactive": {"hostTools": [], "toolTimeout": 5}},
        _open(
            interactive={"approvals": False, "approval_timeout": None, "host_tools": [], "tool_timeout": 5.0}
        ),
    ),
    (
        rpcs.ANSWER_APPROVAL,
        {"sessionId": "s1", "turnId": "t1", "requestId": "0.1.1-abc", "decision": "deny", "message": "no"},
        {
            "session_id": "s1",
            "turn_id": "t1",
            "request_id": "0.1.1-abc",
            "decision": "deny",
            "message": "no",
            "by": "host",
        },
    ),
    (
        rpcs.SEND_MESSAGE,
        {"sessionId": "s1", "turnId": "t1", "messageId": "m1", "text": "go on"},
        {"session_id": "s1", "turn_id": "t1", "message_id": "m1", "text": "go on"},
    ),
    (
        START_TURN,
        {"sessionId": "s1", "turnId": "t1", "prompt": "ls -la"},
        {"session_id": "s1", "turn_id": "t1", "prompt": "ls -la"},
    ),
    (
        START_TURN,
        {"sessionId": "s1", "turnId": "t1", "prompt": ""},
        {"session_id": "s1", "turn_id": "t1", "prompt": ""},
    ),
    (
        READ_TURN,
        {"sessionId": "s1", "turnId": "t1", "offset": 5, "afterStep": 2},
        {"session_id": "s1", "turn_id": "t1", "offset": 5, "after_step": 2},
    ),
    (
        READ_TURN,
        {"sessionId": "s1", "turnId": "t1"},
        {"session_id": "s1", "turn_id": "t1", "offset": 0, "after_step": 0},
    ),
    (
        READ_TURN,
        {"sessionId": "s1", "turnId": "t1", "offset": None, "afterStep": None},
        {"session_id": "s1", "turn_id": "t1", "offset": 0, "after_step": 0},
    ),
    (CANCEL_TURN, {"sessionId": "s1", "turnId": "t1"}, {"session_id": "s1", "turn_id": "t1"}),
    (CLOSE_SESSION, {"sessionId": "s1"}, {"session_id": "s1"}),
    (CLOSE_SESSION, {"sessionId": "s1", "extra": True}, {"session_id": "s1"}),
]


@pytest.mark.parametrize("rpc,payload,expected", GOOD_PAYLOADS, ids=lambda v: getattr(v, "tag", ""))
def test_decode_payload_accepts_good_payloads(rpc, payload, expected):
    assert rpc.decode_payload(payload) == expected


_ANSWER = {"sessionId": "s1", "turnId": "t1", "requestId": "0.1.1-abc", "decision": "allow-once"}
_MESSAGE = {"sessionId": "s1", "turnId": "t1", "messageId": "m1", "text": "hi"}

BAD_PAYLOADS = [
    # (rpc, payload, words the message must contain)
    (OPEN_SESSION, {"sessionId": "s1", "interactive": True}, "interactive"),
    (OPEN_SESSION, {"sessionId": "s1", "interactive": {"approvals": "yes"}}, "approvals"),
    (
        OPEN_SESSION,
        {"sessionId": "s1", "interactive": {"approvals": True, "approvalTimeout": 0}},
        "approvalTimeout",
    ),
    (OPEN_SESSION, {"sessionId": "s1", "interactive": {"approvalTimeout": True}}, "approvalTimeout"),
    (rpcs.ANSWER_APPROVAL, {**_ANSWER, "decision": "yes"}, "decision"),
    (rpcs.ANSWER_APPROVAL, {**_ANSWER, "message": 3}, "message"),
    (rpcs.ANSWER_APPROVAL, {**_ANSWER, "by": "timeout"}, "by"),
    (rpcs.ANSWER_APPROVAL, {**_ANSWER, "requestId": "../x"}, "requestId"),
    (rpcs.ANSWER_APPROVAL, {k: v for k, v in _ANSWER.items() if k != "decision"}, "decision"),
    (rpcs.SEND_MESSAGE, {**_MESSAGE, "text": None}, "text"),
    (rpcs.SEND_MESSAGE, {**_MESSAGE, "text": "x" * (rpcs.MAX_MESSAGE_BYTES + 1)}, "text"),
    (rpcs.SEND_MESSAGE, {**_MESSAGE, "messageId": ""}, "messageId"),
    (OPEN_SESSION, None, "payload"),
    (OPEN_SESSION, [], "payload"),
    (OPEN_SESSION, "s1", "payload"),
    (OPEN_SESSION, {}, "sessionId"),
    (OPEN_SESSION, {"sessionId": 1}, "sessionId"),
    (OPEN_SESSION, {"sessionId": "../s"}, "sessionId"),
    (OPEN_SESSION, {"sessionId": "s1", "state": {**SS, "sessionId": "s2"}}, "sessionId"),
    (OPEN_SESSION, {"sessionId": "s1", "state": {**SS, "revision": -1}}, "revision"),
    (OPEN_SESSION, {"sessionId": "s1", "state": {**SS, "revision": True}}, "revision"),
    (OPEN_SESSION, {"sessionId": "s1", "state": "x"}, "state"),
    (OPEN_SESSION, {"sessionId": "s1", "env": ["FOO=x"]}, "env must be an object"),
    (OPEN_SESSION, {"sessionId": "s1", "env": {"FOO": 1}}, "value of FOO"),
    (OPEN_SESSION, {"sessionId": "s1", "env": {"FOO": "a\x00b"}}, "NUL"),
    (OPEN_SESSION, {"sessionId": "s1", "env": {"A=B": "x"}}, "not a variable name"),
    (OPEN_SESSION, {"sessionId": "s1", "env": {"BRIDGE_CLIENT_SECRET": "x"}}, "reserved"),
    (OPEN_SESSION, {"sessionId": "s1", "env": {"BIG": "x" * (1024 * 1024)}}, "over"),
    (OPEN_SESSION, {"sessionId": "s1", "state": {"revision": 1}}, "sessionId"),
    (START_TURN, None, "payload"),
    (START_TURN, {"sessionId": "s1", "turnId": "t1"}, "prompt"),
    (START_TURN, {"sessionId": "s1", "prompt": "p"}, "turnId"),
    (START_TURN, {"turnId": "t1", "prompt": "p"}, "sessionId"),
    (START_TURN, {"sessionId": "s1", "turnId": "t1", "prompt": None}, "prompt"),
    (START_TURN, {"sessionId": "s1", "turnId": "t1", "prompt": 5}, "prompt"),
    (START_TURN, {"sessionId": "s1", "turnId": "t1", "prompt": ["p"]}, "prompt"),
    (START_TURN, {"sessionId": "s1", "turnId": "a/b", "prompt": "p"}, "turnId"),
    (START_TURN, {"sessionId": "", "turnId": "t1", "prompt": "p"}, "sessionId"),
    (READ_TURN, {"sessionId": "s1"}, "turnId"),
    (READ_TURN, {"sessionId": "s1", "turnId": "t1", "offset": -1}, "offset"),
    (READ_TURN, {"sessionId": "s1", "turnId": "t1", "afterStep": -1}, "afterStep"),
    (READ_TURN, {"sessionId": "s1", "turnId": "t1", "offset": True}, "offset"),
    (READ_TURN, {"sessionId": "s1", "turnId": "t1", "offset": 1.0}, "offset"),
    (READ_TURN, {"sessionId": "s1", "turnId": "t1", "offset": "3"}, "offset"),
    (READ_TURN, {"sessionId": "s1", "turnId": "t1", "afterStep": [1]}, "afterStep"),
    (READ_TURN, {"sessionId": "s1", "turnId": ".."}, "turnId"),
    (CANCEL_TURN, {"sessionId": "s1"}, "turnId"),
    (CANCEL_TURN, {"turnId": "t1"}, "sessionId"),
    (CANCEL_TURN, {"sessionId": "s1", "turnId": None}, "turnId"),
    (CANCEL_TURN, "t1", "payload"),
    (CLOSE_SESSION, {}, "sessionId"),
    (CLOSE_SESSION, None, "payload"),
    (CLOSE_SESSION, {"sessionId": "a" * 129}, "sessionId"),
]


@pytest.mark.parametrize("rpc,payload,word", BAD_PAYLOADS, ids=lambda v: getattr(v, "tag", repr(v)))
def test_decode_payload_rejects_bad_payloads_with_bad_request(rpc, payload, word):
    with pytest.raises(BadRequest) as info:
        rpc.decode_payload(payload)
    assert word in str(info.value)


def test_open_session_rejects_a_state_of_another_session():
    with pytest.raises(BadRequest) as info:
        OPEN_SESSION.decode_payload({"sessionId": "s1", "state": {**SS, "sessionId": "s2"}})
    assert "differs" in str(info.value)


def test_start_turn_prompt_limit_is_in_utf8_bytes():
    ok = {"sessionId": "s", "turnId": "t"}
    assert (
        START_TURN.decode_payload({**ok, "prompt": "a" * MAX_PROMPT_BYTES})["prompt"]
        == "a" * MAX_PROMPT_BYTES
    )
    with pytest.raises(BadRequest):
        START_TURN.decode_payload({**ok, "prompt": "a" * (MAX_PROMPT_BYTES + 1)})
    four = "\U0001f600"  # 4 bytes in UTF-8
    assert START_TURN.decode_payload({**ok, "prompt": four * (MAX_PROMPT_BYTES // 4)})
    with pytest.raises(BadRequest):
        START_TURN.decode_payload({**ok, "prompt": four * (MAX_PROMPT_BYTES // 4) + "a"})
    two = "é"  # 2 bytes: fewer characters than the limit, more bytes
    with pytest.raises(BadRequest):
        START_TURN.decode_payload({**ok, "prompt": two * (MAX_PROMPT_BYTES // 2 + 1)})


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=10,
)
payload_like = st.fixed_dictionaries(
    {},
    optional={
        "sessionId": st.sampled_from(["s1", "s2", "../x", ""]) | json_values,
        "turnId": st.sampled_from(["t1", "a/b"]) | json_values,
        "prompt": st.text(max_size=8) | json_values,
        "offset": st.integers() | json_values,
        "afterStep": st.integers() | json_values,
        "state": st.fixed_dictionaries(
            {},
            optional={
                "sessionId": st.sampled_from(["s1", "s2"]) | json_values,
                "revision": st.integers() | json_values,
                "data": json_values,
            },
        )
        | json_values,
    },
)


@settings(max_examples=300)
@given(st.sampled_from(sorted(CATALOGUE)), payload_like | json_values)
def test_decode_payload_raises_nothing_but_bad_request(tag, payload):
    try:
        result = CATALOGUE[tag].decode_payload(payload)
    except BadRequest:
        return
    assert isinstance(result, dict)
    for key in ("session_id", "turn_id"):
        if key in result:
            assert check_id(result[key], key) == result[key]

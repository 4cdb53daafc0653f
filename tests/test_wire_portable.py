"""C23 on the wire: the export file's format and checks, and the payload checks of the RPCs
that move a session (pure functions, no I/O). Whatever bytes a file holds, reading it is the
body or a typed error, never another exception."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge_client.errors import BadRequest, ExportDamaged, ExportUnsupported
from bridge_client.wire import portable
from bridge_client.wire.rpcs import CATALOGUE


def _body(**kw):
    body = {
        "sessionId": "s-1", "agentId": "echo", "bridgeId": "b", "generation": "g", "epoch": 0,
        "exportedAt": "2026-12-07T13:00:00Z",
        "session": {"sessionId": "s-1", "revision": 3, "data": {"n": 1}},
        "closed": False, "alwaysAllowed": [], "files": [],
        "turns": [{
            "turnId": "t-1", "prompt": "hi", "status": "finished", "startedAt": "2026-12-07T13:00:00Z",
            "turnState": {}, "finish": {"finishReason": "stop"}, "messagesTaken": 0,
            "checkpoint": {"sessionId": "s-1", "revision": 3, "data": {"n": 1}},
            "parts": [{"type": "turn-start", "index": 0, "step": None, "attempt": 1},
                      {"type": "turn-finish", "index": 1, "step": None, "attempt": 1}],
        }],
    }
    body.update(kw)
    return body


def test_c23_an_export_reads_back_as_it_was_written():
    body = _body(session={"sessionId": "s-1", "revision": 3, "data": {"text": "naïve ✓"}})
    data = portable.encode_export(body)
    header, text, end = data.split(b"\n")
    assert end == b"" and json.loads(header)["bytes"] == len(text)
    assert portable.decode_export(data) == body
    assert portable.import_id(body) == portable.import_id(json.loads(text))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_c23_any_damage_is_export_damaged(data):
    good = portable.encode_export(_body())
    at = data.draw(st.integers(0, len(good) - 1))
    kind = data.draw(st.sampled_from(["flip", "cut", "insert"]))
    if kind == "flip":
        bad = good[:at] + bytes([good[at] ^ data.draw(st.integers(1, 255))]) + good[at + 1:]
    elif kind == "cut":
        bad = good[:at]
    else:
        bad = good[:at] + data.draw(st.binary(min_size=1, max_size=8)) + good[at:]
    try:
        body = portable.decode_export(bad)
    except (ExportDamaged, ExportUnsupported):
        return
    # A change the checks cannot see (the header's own key order, spacing) keeps the body whole.
    assert body == _body()


@pytest.mark.parametrize("change,where", [
    ({"epoch": -1}, "epoch"),
    ({"session": {"sessionId": "other", "revision": 1, "data": None}}, "session"),
    ({"sessionId": "../x"}, "sessionId"),
    ({"files": [{"name": 1}]}, "files"),
    ({"turns": "no"}, "turns"),
])
def test_c23_a_body_of_the_wrong_shape_is_export_damaged(change, where):
    with pytest.raises(ExportDamaged, match=where):
        portable.check_body(_body(**change))


def test_c23_two_turns_of_one_id_are_export_damaged():
    body = _body()
    body["turns"] = body["turns"] * 2
    with pytest.raises(ExportDamaged, match="twice"):
        portable.check_body(body)


def test_c23_the_rpc_payloads_are_checked():
    imp, move, exp = (CATALOGUE[t] for t in ("ImportSession", "MoveSession", "ExportSession"))
    assert imp.decode_payload({"sessionId": "s-1", "version": 1, "export": _body()})["session_id"] == "s-1"
    with pytest.raises(BadRequest, match="differs"):
        imp.decode_payload({"sessionId": "s-2", "export": _body()})
    with pytest.raises(BadRequest, match="lacks"):
        imp.decode_payload({"sessionId": "s-1"})
    with pytest.raises(ExportUnsupported):
        imp.decode_payload({"sessionId": "s-1", "version": 2, "export": _body()})
    with pytest.raises(ExportDamaged):
        imp.decode_payload({"sessionId": "s-1", "export": {"sessionId": "s-1"}})
    assert move.decode_payload({"sessionId": "s-1", "epoch": 2, "to": {"sandbox": "x"}})["epoch"] == 2
    for bad in ({"sessionId": "s-1", "epoch": 0, "to": {}}, {"sessionId": "s-1", "epoch": 1, "to": {"a": 1}},
                {"sessionId": "s-1", "epoch": True, "to": {}}):
        with pytest.raises(BadRequest):
            move.decode_payload(bad)
    with pytest.raises(BadRequest):
        exp.decode_payload({})

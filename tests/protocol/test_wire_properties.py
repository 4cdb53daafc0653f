"""Property tests: the wire's values survive encode and decode through a live bridge, not only
through the codec (tests/test_wire_*.py prove the codec alone). Any JSON the host keeps as
session data comes back equal; any valid Unicode prompt comes back equal in turn-start and as
the echo's text; any frame built from wire values decodes back to the same message."""

from __future__ import annotations

import itertools
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge_client.wire import frames
from bridge_client.wire.parts import (
    MAX_OPEN_REVISION,
    MAX_SAFE_INTEGER,
    SessionState,
    TurnStart,
    part_from_dict,
)
from bridge_harness import BridgeProcess, prepare_state, text_of

pytestmark = pytest.mark.timeout(120)

# JSON values as the wire carries them: valid Unicode text (no lone surrogates), JSON-safe
# integers, finite floats.
text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=20,
)
PROPERTY = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
_numbers = itertools.count(1)


@pytest.fixture(scope="module")
def client(tmp_path_factory) -> Iterator[Any]:
    root = tmp_path_factory.mktemp("properties")
    state = str(root / "state")
    prepare_state(state, options={"steps": 1})
    bridge = BridgeProcess(state, str(root / "workspace")).start()
    try:
        with bridge.connect() as c:
            yield c
    finally:
        bridge.stop()


@PROPERTY
@given(data=json_values, revision=st.integers(1, MAX_OPEN_REVISION))
def test_b03_any_session_data_survives_the_bridge(client, data, revision):
    sid = f"p-{next(_numbers)}"
    sent = SessionState(sid, revision, data)
    got = SessionState.from_dict(client.open(sid, sent.to_dict()))
    assert got == sent


@PROPERTY
@given(prompt=st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=200))
def test_c10_any_prompt_survives_the_bridge(client, prompt):
    sid, tid = f"q-{next(_numbers)}", f"t-{next(_numbers)}"
    client.open(sid)
    assert client.start(sid, tid, prompt) == "started"
    parts, _, exit_ = client.read(sid, tid)
    assert exit_ == {"_tag": "Success", "value": None}
    first = part_from_dict(parts[0])
    assert isinstance(first, TurnStart) and first.turn.prompt == prompt
    assert text_of(parts) == prompt
    assert [part_from_dict(p).to_dict() for p in parts] == parts


ids = st.integers(0, MAX_SAFE_INTEGER) | st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)


@PROPERTY
@given(request_id=ids, payload=json_values)
def test_any_request_id_and_payload_echo_back_with_their_json_type(client, request_id, payload):
    # An unknown RPC answers Die for exactly that id, with its JSON type, whatever the payload.
    client.send(frames.Request(request_id, "NoSuchRpc", payload, ()))
    answer = client.recv()
    assert answer["_tag"] == "Exit" and answer["requestId"] == request_id
    assert type(answer["requestId"]) is type(request_id)
    assert frames.decode_bridge(frames.encode(frames.bridge_message(answer)))[0] == frames.bridge_message(
        answer
    )

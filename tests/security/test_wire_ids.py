"""B08: session and turn ids that arrive from the wire are checked before they touch SQLite or
a path: no path traversal, no injection, bounded length. Every bad id gets BadRequest, and
nothing is stored or created for it."""

from __future__ import annotations

import os
import sqlite3

import pytest

import bridge_client as bc
from bridge_client.state_dir import identity
from bridge_client.wire.rpcs import MAX_ID_LENGTH, check_id
from host_support import options, session_options

pytestmark = pytest.mark.timeout(60)

BAD_IDS = [
    "",
    "../etc/passwd",
    "..",
    ".hidden",
    "a/b",
    "a\\b",
    "/abs",
    "x" * (MAX_ID_LENGTH + 1),
    "x" * 100_000,
    "a b",
    "a\x00b",
    "a\nb",
    "'; DROP TABLE sessions; --",
    "x' OR '1'='1",
    'quote"d',
    "%2e%2e%2f",
    "é",
    "\u202egnp.exe",
    "-leading-dash",
    "\ud800",
    None,
    5,
    ["s"],
    {"id": "s"},
]

GOOD_IDS = ["s", "S-1", "a.b_c:d@e-f", "0", "x" * MAX_ID_LENGTH]


def _files(folder: str) -> set:
    found = set()
    for root, dirs, files in os.walk(folder):
        found.update(os.path.relpath(os.path.join(root, n), folder) for n in dirs + files)
    return found


def _payloads(bad):
    return [
        ("OpenSession", {"sessionId": bad, "state": None}),
        ("OpenSession", {"sessionId": "ok-1", "state": {"sessionId": bad, "revision": 1, "data": None}}),
        ("StartTurn", {"sessionId": bad, "turnId": "t-1", "prompt": "x"}),
        ("StartTurn", {"sessionId": "ok-1", "turnId": bad, "prompt": "x"}),
        ("ReadTurn", {"sessionId": "ok-1", "turnId": bad, "offset": 0, "afterStep": 0}),
        ("CancelTurn", {"sessionId": bad, "turnId": "t-1"}),
        ("CloseSession", {"sessionId": bad}),
    ]


def test_b08_bad_wire_ids_get_bad_request_and_touch_nothing(make_bridge, tmp_path):
    bridge = make_bridge()
    state, workspace = bridge.state, bridge.workspace
    with bridge.connect() as c:
        c.open("ok-1")
        before = (_files(state), _files(workspace))
        tried = 0
        for bad in BAD_IDS:
            for tag, payload in _payloads(bad):
                (cause,) = c.causes(tag, payload)
                assert cause["_tag"] == "Fail" and cause["error"]["_tag"] == "BadRequest", (tag, bad, cause)
                tried += 1
        assert c.value("Hello")["agentId"] == "echo"
    assert tried == len(BAD_IDS) * 7
    after = (_files(state), _files(workspace))
    assert after == before, "no file or folder was made for a bad id"
    with sqlite3.connect(os.path.join(state, identity.STORE_FILE)) as db:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            columns = [row[1] for row in db.execute(f"PRAGMA table_info({table})")]
            for column in ("session_id", "turn_id", "id"):
                if column in columns:
                    stored = {row[0] for row in db.execute(f"SELECT {column} FROM {table}")}
                    assert stored <= {"ok-1"}, f"{table}.{column} holds {stored}"
    assert {"sessions", "turns", "segments"} <= set(tables), "the store kept its tables"


@pytest.mark.parametrize("good", GOOD_IDS)
def test_b08_ids_of_the_allowed_shape_pass(good):
    assert check_id(good, "sessionId") == good


@pytest.mark.parametrize("bad", BAD_IDS, ids=repr)
def test_b08_check_id_refuses(bad):
    with pytest.raises(bc.BadRequest):
        check_id(bad, "turnId")


@pytest.mark.parametrize("bad", ["../x", "a/b", "x" * 200, "a b"])
def test_b08_a_host_caller_with_a_bad_turn_id_gets_a_typed_error_and_nothing_runs(sandbox, bad):
    with bc.create_session(options("echo"), session_options(sandbox)) as session:
        with pytest.raises(bc.HarnessError):
            session.turn("hi", turn_id=bad)
        # The session goes on.
        assert "".join(p.text for p in session.turn("again") if isinstance(p, bc.TextDelta)) == "again"

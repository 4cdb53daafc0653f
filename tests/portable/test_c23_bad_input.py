"""C23, bad input: a damaged or truncated export file, a file of a newer format, a restore
into a sandbox whose driver differs, a restore into a bridge that holds those turns: each a
typed error, and nothing half restored (the import is one transaction, after every check)."""
from __future__ import annotations

import glob
import hashlib
import json
import os
import sqlite3

import pytest

import bridge_client as bc
from bridge_client.client import launcher
from bridge_client.wire import portable
from host_support import options, session_options

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def exported(sandbox, tmp_path):
    """An export of an echo session of two turns: ``(path, session id)``."""
    out = str(tmp_path / "chat.export")
    with bc.create_session(options("echo"), session_options(sandbox)) as session:
        list(session.turn("one", turn_id="t-1"))
        list(session.turn("two", turn_id="t-2"))
        session.export(out)
        return out, session.id


def _stores(sandbox):
    return glob.glob(os.path.join(sandbox._state_root, "**", "bridge.sqlite3"), recursive=True)


def _rows(store, sql, *params):
    conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def _rewrite(path, header=None, body=None):
    head, text = open(path, "rb").read().split(b"\n")[:2]
    h = json.loads(head)
    if body is not None:
        text = body
        h.update(bytes=len(text), sha256=hashlib.sha256(text).hexdigest())
    h.update(header or {})
    with open(path, "wb") as f:
        f.write(json.dumps(h).encode() + b"\n" + text + b"\n")


def test_c23_truncated_export_is_export_damaged_and_nothing_is_launched(exported, other_sandbox):
    path, _ = exported
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[: len(data) * 2 // 3])
    with pytest.raises(bc.ExportDamaged, match="truncated"):
        bc.restore_session(path, session_options(other_sandbox), options("echo"))
    assert _stores(other_sandbox) == []


def test_c23_changed_byte_is_export_damaged(exported, other_sandbox):
    path, _ = exported
    data = bytearray(open(path, "rb").read())
    at = data.index(b'"two"')
    data[at + 1] = ord("X")
    open(path, "wb").write(bytes(data))
    with pytest.raises(bc.ExportDamaged, match="SHA-256"):
        bc.restore_session(path, session_options(other_sandbox), options("echo"))
    assert _stores(other_sandbox) == []


@pytest.mark.parametrize("content", [b"", b"not json\n{}\n", b'{"format":"other","version":1}\n{}\n'])
def test_c23_not_an_export_is_export_damaged(tmp_path, other_sandbox, content):
    path = tmp_path / "x.export"
    path.write_bytes(content)
    with pytest.raises(bc.ExportDamaged):
        bc.restore_session(str(path), session_options(other_sandbox), options("echo"))


def test_c23_body_of_the_wrong_shape_is_export_damaged(exported, other_sandbox):
    path, _ = exported
    body = json.loads(open(path, "rb").read().split(b"\n")[1])
    body["turns"][1]["parts"][0]["index"] = 7  # checksummed, but not a log
    _rewrite(path, body=json.dumps(body).encode())
    with pytest.raises(bc.ExportDamaged, match="part 0"):
        bc.restore_session(path, session_options(other_sandbox), options("echo"))


def test_c23_newer_format_is_export_unsupported(exported, other_sandbox):
    path, _ = exported
    _rewrite(path, header={"version": portable.VERSION + 1})
    with pytest.raises(bc.ExportUnsupported) as info:
        bc.restore_session(path, session_options(other_sandbox), options("echo"))
    assert info.value.fields["version"] == portable.VERSION + 1
    assert _stores(other_sandbox) == []


def test_c23_other_driver_is_driver_mismatch_before_any_launch(exported, other_sandbox):
    path, _ = exported
    with pytest.raises(bc.DriverMismatch) as info:
        bc.restore_session(path, session_options(other_sandbox), options("shell"))
    assert info.value.fields == {"expected": "echo", "actual": "shell"}
    assert _stores(other_sandbox) == []


def _import(session, body):
    """ImportSession sent straight to ``session``'s bridge (no OpenSession before it)."""
    made = []
    try:
        conn, _ = launcher.connect(session._plan, holder=made)
        return conn.call(
            portable.IMPORT_SESSION.tag,
            {"sessionId": body["sessionId"], "version": 1, "export": body},
            timeout=10.0,
        )
    finally:
        for conn in made:
            conn.close()


def test_c23_the_bridge_refuses_another_drivers_export(exported, other_sandbox):
    """The bridge checks the driver itself (the host's check is not trusted): nothing stored."""
    path, sid = exported
    body = portable.decode_export(open(path, "rb").read())
    shell = bc.create_session(options("shell"), session_options(other_sandbox))
    try:
        with pytest.raises(bc.DriverMismatch):
            _import(shell, body)
        (store,) = _stores(other_sandbox)
        assert _rows(store, "SELECT count(*) FROM turns") == [(0,)]
        assert _rows(store, "SELECT count(*) FROM sessions WHERE id = ?", sid) == [(0,)]
    finally:
        shell.release()


def test_c23_taken_turn_id_is_restore_conflict_and_nothing_is_written(exported, other_sandbox):
    path, sid = exported
    with bc.create_session(options("echo"), session_options(other_sandbox)) as other:
        list(other.turn("mine", turn_id="t-2"))  # the export's second turn id, another session
    with pytest.raises(bc.RestoreConflict, match="t-2"):
        bc.restore_session(path, session_options(other_sandbox), options("echo"))
    (store,) = _stores(other_sandbox)
    assert _rows(store, "SELECT id FROM turns ORDER BY id") == [("t-2",)]
    assert _rows(store, "SELECT count(*) FROM sessions WHERE id = ?", sid) == [(0,)]
    assert _rows(store, "SELECT count(*) FROM session_epochs") == [(0,)]


def test_c23_import_sent_twice_imports_once(exported, other_sandbox):
    path, sid = exported
    body = portable.decode_export(open(path, "rb").read())
    session = bc.create_session(options("echo"), session_options(other_sandbox))
    try:
        first = _import(session, body)
        again = _import(session, body)
    finally:
        session.release()
    assert first["imported"] is True and again["imported"] is False
    assert first["epoch"] == again["epoch"] == body["epoch"] + 1
    (store,) = _stores(other_sandbox)
    assert _rows(store, "SELECT id FROM turns ORDER BY id") == [("t-1",), ("t-2",)]


def test_c23_a_session_too_large_for_one_import_is_export_too_large(exported, other_sandbox):
    """Over the bridge's frame bound the import would only be a dropped connection: said at
    once, before anything is launched."""
    path, _ = exported
    body = json.loads(open(path, "rb").read().split(b"\n")[1])
    body["turns"][0]["parts"][1]["pad"] = "x" * portable.MAX_IMPORT_BYTES
    _rewrite(path, body=json.dumps(body).encode())
    with pytest.raises(bc.ExportTooLarge) as info:
        bc.restore_session(path, session_options(other_sandbox), options("echo"))
    assert info.value.fields["limit"] == portable.MAX_IMPORT_BYTES
    assert _stores(other_sandbox) == []

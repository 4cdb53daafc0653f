"""A session export as data: the file format (see :doc:`portable-sessions`, "The export
file"), its checks, and the RPCs that move a session between bridges (``ExportSession``,
``ImportSession``, ``MoveSession``). No I/O: the host reads and writes the file, the bridge
reads and writes its store.

The file is two lines of UTF-8 JSON::

    {"format": "bridge-client-session", "version": 1, "bytes": N, "sha256": HEX}
    BODY

``BODY`` is one compact JSON object of ``N`` bytes whose SHA-256 is ``HEX``; the header comes
first so that a file of a newer version is told apart from a damaged one before its body is
read. The body is what ``ExportSession`` answers (:func:`check_body` gives its shape).
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Dict, Mapping

from ..errors import BadRequest, ExportDamaged, ExportUnsupported
from .rpcs import CATALOGUE, Rpc, check_id

__all__ = [
    "FORMAT",
    "VERSION",
    "MAX_IMPORT_BYTES",
    "body_size",
    "encode_export",
    "decode_export",
    "check_body",
    "import_id",
    "EXPORT_SESSION",
    "IMPORT_SESSION",
    "MOVE_SESSION",
]

FORMAT = "bridge-client-session"
"""The ``format`` of an export file's header."""

VERSION = 1
"""The export format this package writes and the newest it reads."""

MAX_IMPORT_BYTES = 16 * 1024 * 1024 - 64 * 1024
"""The largest export body one ``ImportSession`` carries, in bytes of compact JSON: the
bridge's frame bound (16 MiB) less room for the envelope."""

_MAX_HEADER = 4096
_TURN_STATUSES = ("running", "finished")


def _body_text(body: Mapping[str, Any]) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


def body_size(body: Mapping[str, Any]) -> int:
    """The size of ``body`` as compact JSON, in bytes of UTF-8 (what ``ImportSession`` carries)."""
    return len(_body_text(body))


def import_id(body: Mapping[str, Any]) -> str:
    """The id of an import of ``body``: the SHA-256 (hex) of its compact JSON, the same for
    the same export (``ImportSession`` sent twice imports once)."""
    return hashlib.sha256(_body_text(body)).hexdigest()


def encode_export(body: Mapping[str, Any]) -> bytes:
    """The bytes of an export file holding ``body`` (header line, body line).

    Raises:
        ValueError, TypeError: ``body`` is not plain JSON (a NaN, a non-JSON value).
    """
    text = _body_text(body)
    digest = hashlib.sha256(text).hexdigest()
    header = {"format": FORMAT, "version": VERSION, "bytes": len(text), "sha256": digest}
    return json.dumps(header, separators=(",", ":")).encode("ascii") + b"\n" + text + b"\n"


def decode_export(data: bytes, where: str = "the export") -> Dict[str, Any]:
    """Check the bytes of an export file and return its body (checked by :func:`check_body`).

    Args:
        data: the whole file. where: what to call it in messages (a path).

    Raises:
        ExportUnsupported: the header's version is newer than :data:`VERSION` (``version``).
        ExportDamaged: not an export file, or truncated or changed (length, SHA-256), or a
            body not of the documented shape.
    """
    first, newline, rest = data.partition(b"\n")
    if not newline or len(first) > _MAX_HEADER:
        raise ExportDamaged(f"{where} is not a session export: it has no header line")
    try:
        header = json.loads(first)
    except ValueError:
        raise ExportDamaged(f"{where} is not a session export: its header is not JSON") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ExportDamaged(f"{where} is not a session export (its header names no format {FORMAT!r})")
    version = header.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ExportDamaged(f"{where}: the header's version is not a positive integer")
    if version > VERSION:
        raise ExportUnsupported(
            f"{where} is of export format {version}, newer than this bridge_client's {VERSION}: "
            "restore it with the version that wrote it, or a newer one",
            version=version,
        )
    size, digest = header.get("bytes"), header.get("sha256")
    if not isinstance(size, int) or isinstance(size, bool) or not isinstance(digest, str):
        raise ExportDamaged(f"{where}: the header lacks bytes or sha256")
    body_bytes = rest[:-1] if rest.endswith(b"\n") else rest
    if len(body_bytes) != size:
        raise ExportDamaged(
            f"{where} is truncated or damaged: its body is {len(body_bytes)} bytes, the header says {size}"
        )
    if hashlib.sha256(body_bytes).hexdigest() != digest:
        raise ExportDamaged(f"{where} is damaged: its body's SHA-256 differs from the header's")
    try:
        body = json.loads(body_bytes.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise ExportDamaged(f"{where} is damaged: its body is not UTF-8 JSON") from None
    return check_body(body, where)


def _need(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise ExportDamaged(f"{where} is damaged: {what}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check_body(body: Any, where: str = "the export") -> Dict[str, Any]:
    """Check an export body's shape and return it.

    The shape: ``{sessionId, agentId, bridgeId, generation, epoch, exportedAt, session:
    {sessionId, revision, data}, closed, alwaysAllowed: [tool name], files?: [{name, text}]
    (the agent's own transcript, for a CLI agent), turns: [{turnId, prompt,
    status: "running"|"finished", startedAt, turnState, finish, checkpoint: {sessionId,
    revision, data}, messagesTaken, parts: [part JSON object, index 0, 1, ...]}]}``.

    Raises:
        ExportDamaged: it is not of that shape (the message says where).
    """
    _need(isinstance(body, dict), where, "its body is not a JSON object")
    for key in ("sessionId", "agentId", "exportedAt"):
        _need(isinstance(body.get(key), str) and bool(body[key]), where, f"{key} is not a string")
    try:
        check_id(body["sessionId"], "sessionId")
    except BadRequest:
        raise ExportDamaged(f"{where} is damaged: sessionId is not a session id") from None
    _need(_is_int(body.get("epoch")), where, "epoch is not an integer >= 0")
    session = body.get("session")
    _need(
        isinstance(session, dict) and session.get("sessionId") == body["sessionId"]
        and _is_int(session.get("revision")) and "data" in session,
        where, "session is not the session's state",
    )
    always = body.get("alwaysAllowed", [])
    _need(isinstance(always, list) and all(isinstance(a, str) for a in always), where, "alwaysAllowed")
    files = body.get("files", [])
    _need(
        isinstance(files, list) and all(
            isinstance(f, dict) and isinstance(f.get("name"), str) and isinstance(f.get("text"), str)
            for f in files
        ),
        where, "files is not a list of {name, text}",
    )
    turns = body.get("turns")
    _need(isinstance(turns, list), where, "turns is not a list")
    seen = set()
    for n, turn in enumerate(turns):
        _check_turn(turn, body["sessionId"], f"{where}: turn {n}", where)
        _need(turn["turnId"] not in seen, where, f"turn {turn['turnId']!r} is there twice")
        seen.add(turn["turnId"])
    checked: Dict[str, Any] = body
    return checked


def _check_turn(turn: Any, session_id: str, at: str, where: str) -> None:
    _need(isinstance(turn, dict), where, f"{at} is not an object")
    try:
        check_id(turn.get("turnId"), "turnId")
    except BadRequest:
        raise ExportDamaged(f"{where} is damaged: {at} has no valid turnId") from None
    for key in ("prompt", "startedAt"):
        _need(isinstance(turn.get(key), str), where, f"{at}: {key} is not a string")
    _need(turn.get("status") in _TURN_STATUSES, where, f"{at}: status is not running or finished")
    _need(isinstance(turn.get("turnState"), dict), where, f"{at}: turnState is not an object")
    _need(turn.get("finish") is None or isinstance(turn["finish"], dict), where, f"{at}: finish")
    checkpoint = turn.get("checkpoint")
    _need(
        isinstance(checkpoint, dict) and checkpoint.get("sessionId") == session_id
        and _is_int(checkpoint.get("revision")),
        where, f"{at}: checkpoint is not a state of the session",
    )
    _need(_is_int(turn.get("messagesTaken", 0)), where, f"{at}: messagesTaken")
    parts = turn.get("parts")
    _need(isinstance(parts, list), where, f"{at}: parts is not a list")
    for index, part in enumerate(parts):
        _need(
            isinstance(part, dict) and isinstance(part.get("type"), str) and part.get("index") == index
            and _is_int(part.get("attempt", 1)),
            where, f"{at}: part {index} is not a part of index {index}",
        )


# ----------------------------------------------------------------------------- RPCs


def _export_session(payload: Any) -> Dict[str, Any]:
    if not isinstance(payload, dict) or "sessionId" not in payload:
        raise BadRequest("payload lacks sessionId")
    return {"session_id": check_id(payload["sessionId"], "sessionId")}


def _import_session(payload: Any) -> Dict[str, Any]:
    if not isinstance(payload, dict):
        raise BadRequest("payload must be a JSON object")
    missing = [k for k in ("sessionId", "export") if k not in payload]
    if missing:
        raise BadRequest(f"payload lacks {', '.join(missing)}")
    session_id = check_id(payload["sessionId"], "sessionId")
    version = payload.get("version", VERSION)
    if isinstance(version, bool) or not isinstance(version, int) or version > VERSION:
        raise ExportUnsupported(f"export format {version!r} is not one this bridge reads (up to {VERSION})",
                                version=version)
    body = check_body(payload["export"], "the export")
    if body["sessionId"] != session_id:
        raise BadRequest("export.sessionId differs from sessionId")
    return {"session_id": session_id, "body": body}


def _move_session(payload: Any) -> Dict[str, Any]:
    if not isinstance(payload, dict):
        raise BadRequest("payload must be a JSON object")
    session_id = check_id(payload.get("sessionId"), "sessionId")
    epoch = payload.get("epoch")
    if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 1:
        raise BadRequest("epoch must be an integer >= 1")
    to = payload.get("to")
    if (
        not isinstance(to, dict)
        or not all(isinstance(v, str) for v in to.values())
        or len(json.dumps(to)) > 4096
    ):
        raise BadRequest("to must be an object of strings (at most 4 KiB)")
    return {"session_id": session_id, "epoch": epoch, "to": dict(to)}


EXPORT_SESSION = Rpc(
    "ExportSession",
    stream=False,
    resend=True,
    errors=("SessionNotFound", "SessionMoved"),
    check=_export_session,
)
"""``ExportSession {sessionId}``: the body of an export of the session's committed log."""

IMPORT_SESSION = Rpc(
    "ImportSession",
    stream=False,
    resend=True,  # idempotent by the body's import id: the same export again imports once
    errors=("ExportDamaged", "ExportUnsupported", "DriverMismatch", "RestoreConflict", "BadRequest"),
    check=_import_session,
)
"""``ImportSession {sessionId, version, export}``: make the session of ``export`` this
bridge's, all or nothing; answers ``{session, epoch, turns}``."""

MOVE_SESSION = Rpc(
    "MoveSession", stream=False, resend=True, errors=("SessionNotFound", "BadRequest"), check=_move_session
)
"""``MoveSession {sessionId, epoch, to}``: the session went to ``to`` at ``epoch``; this
bridge answers ``SessionMoved`` for it from now on."""

for _rpc in (EXPORT_SESSION, IMPORT_SESSION, MOVE_SESSION):
    CATALOGUE[_rpc.tag] = _rpc


"""A session's log read out whole for an export, and written in whole by an import; the
sessions' epochs and moves (table ``session_epochs``). See :doc:`portable-sessions`.

The read is one read transaction on the reader's connection: the export is a snapshot of
what was committed at one moment. The import is a list of :class:`~.ops.Op` for one
transaction (all or nothing), checked before it is queued: the writer treats a failed write
as fatal, so nothing that could fail in SQLite (a taken turn id) may reach it.
"""
from __future__ import annotations

import json
from typing import Any, Dict, List, NamedTuple, Optional, Sequence

from .ops import SEGMENT_SQL, Op, allow_always_op, messages_taken_op, session_op
from .part_json import json_text
from .reads import StoreReader, _load_parts

__all__ = ["Epoch", "read_session_log", "import_ops", "load_epochs", "move_op", "taken_turn_ids"]


class Epoch(NamedTuple):
    """A session's row of ``session_epochs``: its epoch, the import that made it here (the
    body's SHA-256, or ``None``), and where it went (``{"sandbox", "bridgeId"}``, or ``None``)."""

    epoch: int
    import_id: Optional[str]
    moved_to: Optional[Dict[str, Any]]


_TURN_WHOLE_SQL = (
    "INSERT INTO turns (id, session_id, prompt, status, started_at, turn_state, finish, checkpoint) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_EPOCH_SQL = (
    "INSERT INTO session_epochs (session_id, epoch, import_id, moved_to) VALUES (?, ?, ?, NULL) "
    "ON CONFLICT(session_id) DO UPDATE SET epoch = excluded.epoch, import_id = excluded.import_id, "
    "moved_to = NULL"
)
_MOVE_SQL = (
    "INSERT INTO session_epochs (session_id, epoch, import_id, moved_to) VALUES (?, ?, NULL, ?) "
    "ON CONFLICT(session_id) DO UPDATE SET moved_to = excluded.moved_to, "
    "epoch = max(session_epochs.epoch, excluded.epoch)"
)


def load_epochs(store: StoreReader) -> Dict[str, Epoch]:
    """Every session's committed epoch row, by session id."""
    rows = store._query("SELECT session_id, epoch, import_id, moved_to FROM session_epochs", ())
    return {
        sid: Epoch(int(epoch), import_id, None if moved is None else json.loads(moved))
        for sid, epoch, import_id, moved in rows
    }


def move_op(session_id: str, epoch: int, to: Dict[str, Any]) -> Op:
    """Record that ``session_id`` went to ``to`` at ``epoch`` (this bridge serves it no more)."""
    return Op(_MOVE_SQL, (session_id, epoch, json_text(to)))


def taken_turn_ids(store: StoreReader, turn_ids: Sequence[str]) -> List[str]:
    """Which of ``turn_ids`` the store holds already (of any session)."""
    taken: List[str] = []
    for start in range(0, len(turn_ids), 500):
        chunk = list(turn_ids[start : start + 500])
        marks = ",".join("?" * len(chunk))
        taken += [r[0] for r in store._query(f"SELECT id FROM turns WHERE id IN ({marks})", chunk)]
    return taken


def read_session_log(store: StoreReader, session_id: str) -> Dict[str, Any]:
    """The committed turns of ``session_id``, in the order they started, with their parts,
    and the session's always-allowed tools and epoch, read in one read transaction.

    Returns:
        ``{"turns": [turn as in the export body], "alwaysAllowed": [name], "epoch": int,
        "session": {sessionId, revision, data} or None, "closed": bool}``.

    Raises:
        StoreError: a turn's segments are damaged.
    """
    with store._read_lock:
        conn = store._reader
        conn.execute("BEGIN")
        try:
            session = conn.execute(
                "SELECT revision, data, closed FROM sessions WHERE id = ?", (session_id,)
            ).fetchone()
            rows = conn.execute(
                "SELECT t.id, t.prompt, t.status, t.started_at, t.turn_state, t.finish, t.checkpoint, "
                "COALESCE(m.taken, 0) FROM turns t LEFT JOIN turn_messages m ON m.turn_id = t.id "
                "WHERE t.session_id = ? ORDER BY t.rowid",
                (session_id,),
            ).fetchall()
            turns = []
            for tid, prompt, status, started, state, finish, checkpoint, taken in rows:
                parts = [json.loads(p.text) for p in _load_parts(conn, tid)]
                turns.append({
                    "turnId": tid,
                    "prompt": prompt,
                    "status": "finished" if status == "finished" else "running",
                    "startedAt": started,
                    "turnState": json.loads(state),
                    "finish": None if finish is None else json.loads(finish),
                    "checkpoint": json.loads(checkpoint),
                    "messagesTaken": int(taken),
                    "parts": parts,
                })
            always = [r[0] for r in conn.execute(
                "SELECT tool_name FROM approval_always WHERE session_id = ? ORDER BY tool_name", (session_id,)
            )]
            epoch = conn.execute(
                "SELECT epoch FROM session_epochs WHERE session_id = ?", (session_id,)
            ).fetchone()
        finally:
            conn.execute("COMMIT")
    return {
        "turns": turns,
        "alwaysAllowed": always,
        "epoch": int(epoch[0]) if epoch else 0,
        "session": None if session is None else {
            "sessionId": session_id, "revision": int(session[0]), "data": json.loads(session[1])
        },
        "closed": bool(session[2]) if session is not None else False,
    }


def import_ops(body: Dict[str, Any], revision: int, epoch: int, import_id: str) -> List[Op]:
    """The writes of an import of ``body`` (checked by
    :func:`~bridge_client.wire.portable.check_body`), for one transaction: the session at
    ``revision`` with the body's data, each turn's row, its parts as one segment, its taken
    messages, the always-allowed tools, and the session's ``epoch`` with ``import_id``.

    Raises:
        ValueError, TypeError: a value JSON cannot carry as the store keeps it (a lone
            surrogate): nothing is queued.
    """
    session_id = body["sessionId"]
    ops = [session_op(session_id, revision, body["session"]["data"], False)]
    for turn in body["turns"]:
        tid = turn["turnId"]
        ops.append(Op(_TURN_WHOLE_SQL, (
            tid, session_id, turn["prompt"], turn["status"], turn["startedAt"],
            json_text(turn["turnState"]), None if turn["finish"] is None else json_text(turn["finish"]),
            json_text(turn["checkpoint"]),
        )))
        texts = [json_text(part) for part in turn["parts"]]
        if texts:
            ops.append(Op(SEGMENT_SQL, (tid, 0, len(texts), "\n".join(texts))))
        if turn.get("messagesTaken"):
            ops.append(messages_taken_op(tid, int(turn["messagesTaken"])))
    ops += [allow_always_op(session_id, name) for name in body.get("alwaysAllowed", [])]
    ops.append(Op(_EPOCH_SQL, (session_id, epoch, import_id)))
    return ops

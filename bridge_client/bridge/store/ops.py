"""Writes as data: each an :class:`Op` (SQL and parameters) that the writer runs, in order, in
the transaction it was queued for."""
from __future__ import annotations

from typing import Any, NamedTuple, Optional, Sequence

from .part_json import json_text as _dumps
from .records import PartSink, StoredPart

__all__ = [
    "Op",
    "SEGMENT_SQL",
    "session_op",
    "turn_op",
    "part_op",
    "checkpoint_op",
    "finish_op",
    "allow_always_op",
    "interactive_op",
    "messages_taken_op",
    "fold_turn_row",
]


class Op(NamedTuple):
    """One queued write. ``sink``/``part`` are set for a part written with :func:`part_op`."""

    sql: str
    params: Sequence[Any]
    sink: Optional[PartSink] = None
    part: Optional[StoredPart] = None



_SESSION_SQL = (
    "INSERT INTO sessions (id, revision, data, closed) VALUES (?, ?, ?, ?) "
    "ON CONFLICT(id) DO UPDATE SET revision = excluded.revision, data = excluded.data, "
    "closed = excluded.closed "
    "WHERE excluded.revision >= sessions.revision"
)
_TURN_SQL = (
    "INSERT INTO turns (id, session_id, prompt, status, started_at, turn_state, finish, checkpoint) "
    "VALUES (?, ?, ?, 'running', ?, ?, NULL, ?)"
)
_TURN_WHOLE_SQL = (
    "INSERT INTO turns (id, session_id, prompt, status, started_at, turn_state, finish, checkpoint) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_PART_SQL = "-- part"  # a marker: parts are written as segments (SEGMENT_SQL)
SEGMENT_SQL = "INSERT INTO segments (turn_id, first_idx, n_parts, parts) VALUES (?, ?, ?, ?)"
"""How the writer stores one segment: ``(turn_id, first_idx, n_parts, parts)``."""
_CHECKPOINT_SQL = "UPDATE turns SET checkpoint = ? WHERE id = ?"
_FINISH_SQL = "UPDATE turns SET status = 'finished', finish = ? WHERE id = ?"


def session_op(session_id: str, revision: int, data: Any, closed: bool) -> Op:
    """Write a session. A revision lower than the stored one changes nothing (revisions only
    grow). Raises TypeError/ValueError when ``data`` is not JSON."""
    return Op(_SESSION_SQL, (session_id, revision, _dumps(data), 1 if closed else 0))


def turn_op(
    turn_id: str, session_id: str, prompt: str, started_at: str, turn_state: Any, checkpoint: Any
) -> Op:
    """Insert a new turn, status ``running``; ``checkpoint`` is the SessionState JSON at its start."""
    return Op(_TURN_SQL, (turn_id, session_id, prompt, started_at, _dumps(turn_state), _dumps(checkpoint)))


def part_op(sink: Optional[PartSink], turn_id: str, part: StoredPart) -> Op:
    """Append one part, on its own (a turn's parts go through its :class:`PartBuffer`);
    ``sink.publish`` gets it after the commit. Parts of one :meth:`Store.submit` with
    consecutive indexes of one turn become one segment.

    Raises:
        ValueError: ``part.text`` holds a newline (part JSON is compact).
    """
    if "\n" in part.text:
        raise ValueError("part JSON must be compact (no newline)")
    return Op(_PART_SQL, (turn_id,), sink, part)


def checkpoint_op(turn_id: str, checkpoint: Any) -> Op:
    """Record the session state (JSON object) as of the turn's last completed step."""
    return Op(_CHECKPOINT_SQL, (_dumps(checkpoint), turn_id))


def finish_op(turn_id: str, finish: Any) -> Op:
    """Mark a turn finished, with its ``turn-finish`` fields (JSON object)."""
    return Op(_FINISH_SQL, (_dumps(finish), turn_id))


def allow_always_op(session_id: str, tool_name: str) -> Op:
    """Remember that session ``session_id`` allowed ``tool_name`` always."""
    return Op(
        "INSERT OR IGNORE INTO approval_always (session_id, tool_name) VALUES (?, ?)", (session_id, tool_name)
    )


def interactive_op(session_id: str, approvals: bool, timeout: Optional[float]) -> Op:
    """Record the approval settings the last ``OpenSession`` of ``session_id`` gave (not
    secret, unlike its environment): a restarted bridge continues its turns with them until
    the session is opened again."""
    return Op(
        "INSERT INTO session_interactive (session_id, approvals, timeout) VALUES (?, ?, ?) "
        "ON CONFLICT(session_id) DO UPDATE SET approvals = excluded.approvals, timeout = excluded.timeout",
        (session_id, 1 if approvals else 0, timeout),
    )


def messages_taken_op(turn_id: str, taken: int) -> Op:
    """Record how many user messages the turn's completed steps took (written with a
    ``step-finish``: a step run again after a restart is handed the rest again)."""
    return Op(
        "INSERT INTO turn_messages (turn_id, taken) VALUES (?, ?) "
        "ON CONFLICT(turn_id) DO UPDATE SET taken = excluded.taken",
        (turn_id, taken),
    )


def fold_turn_row(ops: Sequence[Op]) -> Sequence[Op]:
    """``ops`` of one transaction with a new turn's row first: that row's checkpoint and
    finish updates among them folded into its insert (one statement instead of up to
    three: a turn whose driver ends at once commits its start, steps and finish together).
    The other ops keep their order; none of them touches the turn's row."""
    if len(ops) < 2 or ops[0].sql is not _TURN_SQL:
        return ops
    turn_id, session_id, prompt, started_at, turn_state, checkpoint = ops[0].params
    status, finish = "running", None
    rest = []
    for op in ops[1:]:
        if op.sql is _CHECKPOINT_SQL and op.params[1] == turn_id:
            checkpoint = op.params[0]
        elif op.sql is _FINISH_SQL and op.params[1] == turn_id:
            status, finish = "finished", op.params[0]
        else:
            rest.append(op)
    if len(rest) == len(ops) - 1:
        return ops
    row = (turn_id, session_id, prompt, status, started_at, turn_state, finish, checkpoint)
    return [Op(_TURN_WHOLE_SQL, row), *rest]

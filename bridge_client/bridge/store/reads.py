"""Reading the log back: a turn's parts (its segments split by offset), sessions, turns and
approval settings, through a second connection that sees committed data only; and reading a
store file without a running bridge (:func:`read_parts`, :func:`summary`)."""
from __future__ import annotations

import json
import sqlite3
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .part_json import stored_part as _stored_part
from .records import StoredPart, StoredSession, StoredTurn, StoreError
from .schema import open_read_only as _open_read_only

__all__ = ["StoreReader", "read_parts", "summary"]


class StoreReader:
    """The read side of a :class:`~bridge_client.bridge.store.Store`: its own connection to the
    file, which sees committed data only. The ``load_*`` methods may be called from any thread.

    Args:
        conn: a connection to the store file (the reader's own; closed by :meth:`_close_reader`).
    """

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._reader = conn
        self._read_lock = threading.Lock()

    def _close_reader(self) -> None:
        with self._read_lock:
            self._reader.close()

    def _query(self, sql: str, params: Sequence[Any]) -> List[Any]:
        with self._read_lock:
            return self._reader.execute(sql, params).fetchall()

    def load_session(self, session_id: str) -> Optional[StoredSession]:
        """Return the committed session ``session_id``, or ``None``."""
        rows = self._query("SELECT id, revision, data, closed FROM sessions WHERE id = ?", (session_id,))
        if not rows:
            return None
        sid, revision, data, closed = rows[0]
        return StoredSession(sid, revision, json.loads(data), bool(closed))

    def load_turn(self, turn_id: str) -> Optional[StoredTurn]:
        """Return the committed turn ``turn_id`` (of any session), or ``None``."""
        rows = self._query(
            "SELECT id, session_id, prompt, status, started_at, turn_state, finish, checkpoint "
            "FROM turns WHERE id = ?",
            (turn_id,),
        )
        if not rows:
            return None
        tid, sid, prompt, status, started_at, turn_state, finish, checkpoint = rows[0]
        return StoredTurn(
            tid,
            sid,
            prompt,
            status,
            started_at,
            json.loads(turn_state),
            json.loads(finish) if finish is not None else None,
            json.loads(checkpoint),
        )

    def load_parts(self, turn_id: str) -> List[StoredPart]:
        """Return every committed part of ``turn_id``, in index order (its segments split).

        Raises:
            StoreError: the segments do not make one gapless log (a damaged file).
        """
        with self._read_lock:
            return _load_parts(self._reader, turn_id)

    def load_always(self, session_id: str) -> List[str]:
        """Return the tool names session ``session_id`` allowed always (committed), sorted."""
        rows = self._query(
            "SELECT tool_name FROM approval_always WHERE session_id = ? ORDER BY tool_name", (session_id,)
        )
        return [row[0] for row in rows]

    def load_interactive(self, session_id: str) -> Tuple[bool, Optional[float]]:
        """Return the committed approval settings of ``session_id`` (``(approvals, timeout in
        seconds or None)``; ``(False, None)`` when none were stored)."""
        sql = "SELECT approvals, timeout FROM session_interactive WHERE session_id = ?"
        rows = self._query(sql, (session_id,))
        if not rows:
            return False, None
        return bool(rows[0][0]), None if rows[0][1] is None else float(rows[0][1])

    def load_messages_taken(self, turn_id: str) -> int:
        """Return how many user messages the completed steps of ``turn_id`` took (0 if none)."""
        rows = self._query("SELECT taken FROM turn_messages WHERE turn_id = ?", (turn_id,))
        return int(rows[0][0]) if rows else 0

    def counts(self) -> Dict[str, int]:
        """Return ``{"sessions": n, "turns": n, "running": n}`` of what is committed."""
        with self._read_lock:
            return _counts(self._reader)

def _load_parts(conn: sqlite3.Connection, turn_id: str) -> List[StoredPart]:
    rows = conn.execute(
        "SELECT first_idx, n_parts, parts FROM segments WHERE turn_id = ? ORDER BY first_idx", (turn_id,)
    ).fetchall()
    out: List[StoredPart] = []
    for first, count, joined in rows:
        texts = [joined] if count == 1 else joined.split("\n")
        if first != len(out) or len(texts) != count:
            raise StoreError(f"turn {turn_id!r}: the stored log is damaged at part {len(out)}")
        out.extend(_stored_part(first + i, text) for i, text in enumerate(texts))
    return out


def _counts(conn: sqlite3.Connection) -> Dict[str, int]:
    (sessions,) = conn.execute("SELECT COUNT(*) FROM sessions").fetchone()
    turns, running = conn.execute(
        "SELECT COUNT(*), COALESCE(SUM(status = 'running'), 0) FROM turns"
    ).fetchone()
    return {"sessions": int(sessions), "turns": int(turns), "running": int(running)}

def read_parts(path: str, turn_id: str) -> List[StoredPart]:
    """Read a turn's committed parts from a store file, read-only, without a running bridge
    (tools and tests; the layout is this module's business).

    Args:
        path: a ``bridge.sqlite3`` file of the current schema (:data:`SCHEMA_VERSION`).
        turn_id: the turn.

    Returns:
        Its parts in index order (empty for an unknown turn).

    Raises:
        FileNotFoundError: no file at ``path``. sqlite3.Error: not a readable store of this
        layout. StoreError: the log is damaged.
    """
    conn = _open_read_only(path)
    try:
        return _load_parts(conn, turn_id)
    finally:
        conn.close()


def summary(path: str) -> Dict[str, int]:
    """Count what a bridge's store holds, without a running bridge and without writing to it.

    ``running`` counts unfinished turns (running now, or left unfinished by a bridge that
    died; the next ``StartTurn`` continues those).

    Args:
        path: a ``bridge.sqlite3`` file.

    Returns:
        ``{"sessions": n, "turns": n, "running": n}``; all zero for a store with no tables yet.

    Raises:
        FileNotFoundError: no file at ``path``.
        sqlite3.Error: the file is not a readable SQLite database.
    """
    conn = _open_read_only(path)
    try:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not {"sessions", "turns"} <= tables:
            return {"sessions": 0, "turns": 0, "running": 0}
        return _counts(conn)
    finally:
        conn.close()

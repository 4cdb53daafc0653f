"""A session that moves between bridges: ``ExportSession``, ``ImportSession`` and
``MoveSession`` (see :doc:`portable-sessions`).

- Export: the session's state and its committed log (every turn, its parts, checkpoints and
  taken messages), read as one snapshot of the store.
- Import: all or nothing. Everything is checked first (the driver, the shape, that no turn id
  is taken and that the session has no turns here), then written in one transaction; the
  session's epoch becomes the export's plus one. The same export sent again is answered as
  the first time (the import id is the body's SHA-256), so the RPC is safe to resend.
- Move: the session went elsewhere at an epoch; from then on every RPC naming it is answered
  :class:`~bridge_client.errors.SessionMoved` (where it went), recorded in the store so that
  a restarted bridge says so too.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Dict

from ..errors import DriverMismatch, RestoreConflict, SessionNotFound
from ..wire.parts import SessionState
from ..wire.portable import import_id
from .sessions import Session
from .store.portable import import_ops, load_epochs, move_op, read_session_log, taken_turn_ids
from .turns import TurnManager, iso_now

__all__ = ["SessionMover", "portable_handlers"]

log = logging.getLogger("bridge_client.bridge.turns")


class SessionMover:
    """The three RPCs of a moving session, over a bridge's :class:`TurnManager` (its lock,
    store and sessions). Every method may be called from any thread.

    Args:
        manager: the bridge's sessions and turns.
    """

    def __init__(self, manager: TurnManager) -> None:
        self._m = manager

    def export_session(self, session_id: str) -> Dict[str, Any]:
        """``ExportSession``: the export body of the session (see
        :func:`~bridge_client.wire.portable.check_body` for its shape): its state as this
        bridge holds it, its committed turns with their parts, and, from a driver with
        ``export_files(data)``, the agent's own files (its transcript).

        Raises:
            SessionNotFound: no such session. SessionMoved: it was moved elsewhere.
        """
        m = self._m
        with m._lock:
            m._check_open()
            session = m._get_session(session_id)
            if session is None:
                raise SessionNotFound(f"no session {session_id!r}", sessionId=session_id)
            state = session.state().to_dict()
            closed = session.closed
        logged = read_session_log(m._store, session_id)
        hook = getattr(m._driver, "export_files", None)
        files = list(hook(state["data"])) if callable(hook) else []
        return {
            "sessionId": session_id,
            "agentId": m._agent_id,
            "bridgeId": m._bridge_id,
            "generation": m._generation,
            "epoch": logged["epoch"],
            "exportedAt": iso_now(),
            "session": state,
            "closed": closed,
            "alwaysAllowed": logged["alwaysAllowed"],
            "files": files,
            "turns": logged["turns"],
        }

    def import_session(self, session_id: str, body: Dict[str, Any]) -> Dict[str, Any]:
        """``ImportSession``: make the exported session this bridge's, all or nothing.

        Returns:
            ``{"session": SessionState JSON, "epoch": int, "turns": int, "imported": bool}``
            (``imported`` is false when this very export was imported before).

        A driver with ``import_files(data, files)`` gets the export's ``files`` (its own
        transcript) before the log is written.

        Raises:
            DriverMismatch: the export was made by another driver (agent id).
            RestoreConflict: this bridge holds turns of the session, or turns of those ids.
            OSError: the driver cannot write its files (nothing of the log is written).
        """
        m = self._m
        if body["agentId"] != m._agent_id:
            raise DriverMismatch(
                f"the export is of the {body['agentId']} agent, this bridge runs {m._agent_id}: "
                "restore it into a sandbox with the same agent",
                expected=body["agentId"], actual=m._agent_id,
            )
        iid = import_id(body)
        ids = [t["turnId"] for t in body["turns"]]
        with m._lock:
            m._check_open()
            epochs = load_epochs(m._store)
            row = epochs.get(session_id)
            if row is not None and row.import_id == iid and row.moved_to is None:
                session = m._sessions.get(session_id) or m._get_session(session_id)
                assert session is not None
                return {"session": session.state().to_dict(), "epoch": row.epoch, "turns": len(ids),
                        "imported": False}
            held = m._store._query("SELECT count(*) FROM turns WHERE session_id = ?", (session_id,))[0][0]
            held += sum(1 for t in m._turns.values() if t.session_id == session_id)
            if held:
                raise RestoreConflict(
                    f"this bridge holds turns of session {session_id!r} already: restore into "
                    "another sandbox, or under another state directory",
                    sessionId=session_id,
                )
            taken = sorted(set(taken_turn_ids(m._store, ids)) | {i for i in ids if i in m._turns})
            if taken:
                raise RestoreConflict(
                    f"this bridge holds turn {taken[0]!r} of another session", sessionId=session_id,
                    turnId=taken[0],
                )
            here = m._sessions.get(session_id)
            revision = max(body["session"]["revision"], here.revision if here is not None else 0)
            epoch = max(body["epoch"], row.epoch if row is not None else 0) + 1
            ops = import_ops(body, revision, epoch, iid)
            # The agent's own files first (its transcript, keyed by its session id: harmless
            # if the transaction below failed), then the log in one transaction.
            hook = getattr(m._driver, "import_files", None)
            if callable(hook) and body.get("files"):
                hook(body["session"]["data"], list(body["files"]))
            m._store.wait(m._store.submit(*ops), m._commit_timeout)
            session = Session(session_id, revision, body["session"]["data"])
            if here is not None:  # what the last OpenSession gave, kept in memory
                session.env, session.approvals = here.env, here.approvals
                session.approval_timeout, session.host_tools = here.approval_timeout, here.host_tools
                session.tool_timeout = here.tool_timeout
            m._sessions[session_id] = session
            moved(m).pop(session_id, None)
            with m._always._lock:
                m._always._sessions.pop(session_id, None)
        log.info("session %s imported: %d turns, epoch %d", session_id, len(ids), epoch)
        return {"session": SessionState(session_id, revision, session.data).to_dict(), "epoch": epoch,
                "turns": len(ids), "imported": True}

    def move_session(self, session_id: str, epoch: int, to: Dict[str, Any]) -> Dict[str, Any]:
        """``MoveSession``: the session went to ``to`` at ``epoch``; every later RPC naming it
        is answered ``SessionMoved``. Idempotent.

        Returns:
            ``{"sessionId", "epoch", "to"}``.

        Raises:
            SessionNotFound: no such session here.
        """
        m = self._m
        with m._lock:
            m._check_open()
            known = moved(m).get(session_id)
            if known is None:
                if m._get_session(session_id) is None:
                    raise SessionNotFound(f"no session {session_id!r}", sessionId=session_id)
            m._store.wait(m._store.submit(move_op(session_id, epoch, to)), m._commit_timeout)
            moved(m)[session_id] = (max(epoch, known[0]) if known else epoch, dict(to))
            m._sessions.pop(session_id, None)
        log.info("session %s moved to %s (epoch %d)", session_id, to, epoch)
        return {"sessionId": session_id, "epoch": epoch, "to": to}


def moved(manager: TurnManager) -> Dict[str, Any]:
    """The registry's map of moved sessions: ``{session id: (epoch, to)}`` (see
    :meth:`~bridge_client.bridge.sessions.SessionRegistry._moved_check`)."""
    return manager._moved


def portable_handlers(manager: TurnManager) -> Dict[str, Callable[..., Any]]:
    """The handlers of ``ExportSession``, ``ImportSession`` and ``MoveSession``, by tag."""
    mover = SessionMover(manager)
    return {
        "ExportSession": mover.export_session,
        "ImportSession": mover.import_session,
        "MoveSession": mover.move_session,
    }

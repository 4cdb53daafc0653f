"""A session outlives its sandbox: :func:`restore_session` makes a live session, in another
sandbox, from the export file :meth:`Session.export <bridge_client.client.session.Session.export>`
wrote. See :doc:`portable-sessions`.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import time
from typing import Any, List, Optional, Tuple, Union

from .agent import bridge_options, create_session
from .client import launcher
from .client.connection import Connection
from .client.session import Session
from .client.session_export import read_export
from .errors import BridgeUnavailable, ConnectionLost, DriverMismatch, ExportTooLarge, HarnessError
from .options import BridgeOptions, CreateSessionOptions, Workspace
from .sandbox.base import Sandbox
from .wire import portable
from .wire.parts import SessionState

__all__ = ["restore_session", "read_export"]

log = logging.getLogger("bridge_client")


def restore_session(
    source: "str | os.PathLike[str]",
    session_options: "CreateSessionOptions | Sandbox | str | os.PathLike[str]",
    options: Union[BridgeOptions, str, None] = None,
    *,
    agent_options: Any = None,
    previous: Optional[Session] = None,
) -> Session:
    """Make the session of an export file live again in another sandbox.

    The sandbox's bridge (found, or installed and launched) imports the export's log and
    checkpoint in one transaction: every turn, with its parts at their offsets, and the
    session state (for ``openai``: its messages, so the next turn's agent remembers the
    earlier turns). Turn ids of the export stay taken (a ``turn()`` with one of them is that
    turn again, or ``TurnConflict``), and a turn the export holds unfinished continues from its
    last completed step at its next ``StartTurn``. The session gets a new epoch (the export's
    plus one). With ``previous`` (the session in its old sandbox, when that bridge can still
    be reached), the old bridge is told where the session went: from then on it answers
    every request for the session with :class:`~bridge_client.errors.SessionMoved`, so a host
    still holding the old state is never served there again.

    Example::

        session.export("chat.export")                      # before the sandbox goes
        restored = bc.restore_session("chat.export", "/tmp/new-sandbox")
        restored.turn("and then?")

    Args:
        source: the export file (``str`` or path-like).
        session_options: where the session goes on, as for :func:`~bridge_client.create_session`
            (a :class:`CreateSessionOptions`, a :class:`Sandbox`, or a folder); its
            ``session_id`` and ``resume`` are replaced by the export's.
        options: the bridge's :class:`BridgeOptions`, or a driver name; ``None``: the export's
            agent id as a driver name (a built-in driver).
        agent_options: plain JSON for the driver, only with a driver name (or ``None``).
        previous: the session in the old sandbox, to be told it moved (a failure to reach it
            is logged, not raised: the restore is done by then). It is released.

    Returns:
        The restored :class:`~bridge_client.client.session.Session` (not yet connected to
        anything but for the import; a context manager).

    Raises:
        ExportDamaged: the file is damaged, truncated, or not an export.
        ExportUnsupported: the file is of a newer format version.
        ExportTooLarge: the session is larger than one import carries (16 MiB less 64 KiB of
            JSON): nothing is launched.
        DriverMismatch: ``options`` (or the sandbox's bridge) runs another driver than the
            export's: checked before anything is launched, and again by the bridge.
        RestoreConflict: the new sandbox's bridge holds turns of that session already.
        OSError: the file cannot be read (``FileNotFoundError``).
        BridgeLaunchError, BridgeUnavailable, Unauthorized, SandboxGone, TemplateError:
            the new sandbox's bridge cannot be reached or launched (nothing was imported).
        ValueError, TypeError: as :func:`~bridge_client.create_session` for bad options.

    Nothing is half restored: the import is one transaction in the new bridge's store, and
    every check (the driver, the shape, taken turn ids) comes before it.
    """
    body = read_export(source)
    size = portable.body_size(body)
    if size > portable.MAX_IMPORT_BYTES:
        raise ExportTooLarge(
            f"the session is {size} bytes as JSON, more than one import carries "
            f"({portable.MAX_IMPORT_BYTES}): it cannot be restored by this version",
            bytes=size, limit=portable.MAX_IMPORT_BYTES,
        )
    agent_id = body["agentId"]
    state = SessionState.from_dict(body["session"])
    opts, given = _with_session(session_options, state)
    if options is None or isinstance(options, str):
        # As create_session does for a Sandbox: a container's Python is not this one.
        python = None
        if given is not None and type(given).__name__ != "LocalSandbox":
            python = str(getattr(given, "python", None) or "python3")
        options = bridge_options(options or agent_id, agent_options=agent_options, python=python)
        agent_options = None
    session = create_session(options, opts, agent_options=agent_options)
    actual = session._options.id
    if actual != agent_id:
        raise DriverMismatch(
            f"the export is of the {agent_id} agent, the options are of {actual}: restore it "
            "with the same agent",
            expected=agent_id, actual=actual,
        )
    payload = {"sessionId": state.session_id, "version": portable.VERSION, "export": body}
    try:
        result = _import(session, payload)
    except BaseException:
        session.release()
        raise
    log.info(
        "session %s restored into sandbox %s: %d turns, epoch %s",
        session.id, session.sandbox.id, result.get("turns", 0), result.get("epoch"),
    )
    if previous is not None:
        _tell_moved(previous, session, int(result["epoch"]))
    return session


def _with_session(
    session_options: Any, state: SessionState
) -> Tuple[CreateSessionOptions, Optional[Sandbox]]:
    """``session_options`` as :func:`create_session` takes it, with the export's session; and
    the sandbox when a Sandbox or a folder was given (``None`` for CreateSessionOptions)."""
    if isinstance(session_options, CreateSessionOptions):
        return dataclasses.replace(session_options, resume=state, session_id=None), None
    if isinstance(session_options, Sandbox):
        sandbox: Sandbox = session_options
    else:
        from .sandbox.local import LocalSandbox

        sandbox = LocalSandbox(session_options)
    return CreateSessionOptions(workspace=Workspace(sandbox), resume=state), sandbox


def _import(session: Session, payload: Any) -> Any:
    """Send ``ImportSession`` on a connection of the session's bridge, before any
    ``OpenSession`` (an open would write the session's state before its turns). Safe to send
    again (idempotent by the export's SHA-256): a dropped connection is tried again within
    the session's resend window.

    Raises:
        BridgeUnavailable: the connection dropped for the whole resend window.
    """
    opts = session._channel.options
    deadline = time.monotonic() + opts.resend_window
    while True:
        made: List[Connection] = []
        try:
            conn, _hello = launcher.connect(session._plan, holder=made)
            return conn.call(portable.IMPORT_SESSION.tag, payload, timeout=max(opts.request_timeout, 60.0))
        except ConnectionLost as exc:
            if time.monotonic() >= deadline:
                raise BridgeUnavailable(
                    f"the bridge of sandbox {session.sandbox.id} cannot be reached to import "
                    f"session {session.id}: {exc}"
                ) from exc
            time.sleep(0.1)
        finally:
            for conn in made:
                conn.close()


def _tell_moved(previous: Session, session: Session, epoch: int) -> None:
    """Tell the old bridge where the session went, then release the old session."""
    to = {"sandbox": session.sandbox.id, "bridgeId": session.bridge_id}
    try:
        previous._call(portable.MOVE_SESSION, {"sessionId": previous.id, "epoch": epoch, "to": to})
    except HarnessError as exc:
        log.warning("session %s: the old bridge was not told it moved: %s", previous.id, exc)
    previous.release()

"""The session registry of the bridge: :class:`Session` (a session as this bridge holds it)
and :class:`SessionRegistry`, which answers ``OpenSession`` and ``CloseSession`` and finds
sessions (in memory, else read back from the store). Revisions only grow, up to 2**53-1.
"""
from __future__ import annotations

import json
import logging
import threading
from typing import Any, Dict, List, Optional, Tuple

from ..errors import (
    ApprovalsUnsupported,
    BadRequest,
    RevisionExhausted,
    SessionMoved,
    SessionNotFound,
    ToolsUnsupported,
)
from ..wire.host_parts import check_host_tools
from ..wire.parts import MAX_OPEN_REVISION, MAX_SAFE_INTEGER, SessionState
from .driver import Driver
from .store import Op, Store, interactive_op, json_text, session_op
from .store.portable import load_epochs

__all__ = ["Session", "SessionRegistry"]

log = logging.getLogger("bridge_client.bridge.turns")  # one logger for the turn runtime

_dumps = json_text


class Session:
    """A session as this bridge holds it (the store keeps a copy; revisions only grow).

    Attributes:
        id: the session id; revision, data: its state; closed: closed by ``CloseSession``.
        env: the environment the last ``OpenSession`` gave (names to values). Held in memory
            only, never in the store (values may be secrets): a restarted bridge has it again
            when the host opens the session on its new connection.
    """

    __slots__ = (
        "id", "revision", "data", "closed", "env", "approvals", "approval_timeout",
        "host_tools", "tool_timeout",
    )

    def __init__(self, session_id: str, revision: int, data: Any, closed: bool = False) -> None:
        self.id = session_id
        self.revision = revision
        self.data = data
        self.closed = closed
        self.env: Dict[str, str] = {}
        # OpenSession's interactive settings: in memory, like env (every connection sends them).
        self.approvals = False
        self.approval_timeout: Optional[float] = None
        # OpenSession's host tools (their specs) and tool timeout: in memory, like env.
        self.host_tools: List[Dict[str, Any]] = []
        self.tool_timeout: Optional[float] = None

    def state(self) -> SessionState:
        """Return the state as a :class:`SessionState` value."""
        return SessionState(self.id, self.revision, self.data)

    def op(self) -> Op:
        """Return the store op that writes this session."""
        return session_op(self.id, self.revision, self.data, self.closed)



def _check_tools(
    driver: Driver, agent_id: str, session_id: str, interactive: Optional[Dict[str, Any]]
) -> List[Dict[str, Any]]:
    """The host tools ``OpenSession`` gave, checked against what the driver can offer.

    Raises:
        BadRequest, ToolsUnsupported: see :meth:`SessionRegistry.open_session`.
    """
    tools = check_host_tools((interactive or {}).get("host_tools"))
    if not tools:
        return tools
    if not getattr(driver, "supports_host_tools", False):
        why = getattr(driver, "host_tools_refusal", None)  # the driver's reason, with its fix
        raise ToolsUnsupported(
            f"the {agent_id} agent cannot call host tools: "
            + (f"{why}; or open the session without tools" if why else "open the session without tools"),
            sessionId=session_id,
        )
    own = set(getattr(driver, "tool_names", ()))
    clash = sorted(t["name"] for t in tools if t["name"] in own)
    if clash:
        raise BadRequest(
            f"host tool {clash[0]!r} has the name of one of the {agent_id} agent's own tools: rename it",
            sessionId=session_id,
        )
    return tools


def _check_room(session: Session) -> None:
    """Refuse a change that would take a session's revision past 2**53-1.

    Raises:
        RevisionExhausted: the revision is at the limit.
    """
    if session.revision >= MAX_SAFE_INTEGER:
        raise RevisionExhausted(
            f"session {session.id!r} is at revision {session.revision}, the largest JSON peers read "
            "exactly: it cannot change any more; start a new session",
            sessionId=session.id,
            revision=session.revision,
        )



class SessionRegistry:
    """The sessions of a bridge (the base of :class:`~bridge_client.bridge.turns.TurnManager`).

    Holds the manager's lock (``_lock``, the first in the lock order) and its ``_closing`` flag.

    Args:
        store: the bridge's store. driver: the agent (its ``initial_state``).
        agent_id: the agent's id (for messages). commit_timeout: seconds an RPC waits for its
            writes to be committed.
    """

    def __init__(self, store: Store, driver: Driver, agent_id: str, commit_timeout: float) -> None:
        self._store = store
        self._driver = driver
        self._agent_id = agent_id
        self._commit_timeout = commit_timeout
        self._lock = threading.Lock()
        self._sessions: Dict[str, Session] = {}
        self._closing = False
        # Sessions restored elsewhere: {id: (epoch, where to)}; every RPC naming one is refused.
        self._moved: Dict[str, Tuple[int, Dict[str, Any]]] = {
            sid: (row.epoch, row.moved_to) for sid, row in load_epochs(store).items() if row.moved_to
        }

    def open_session(
        self,
        session_id: str,
        state: Optional[SessionState],
        env: Optional[Dict[str, str]] = None,
        interactive: Optional[Dict[str, Any]] = None,
    ) -> Dict[str, Any]:
        """``OpenSession``: keep whichever of the stored copy and ``state`` has the higher
        revision; a new session starts at revision 0 with the driver's initial data. Re-opens
        a closed session.

        ``env`` becomes the session's environment for the turns that start (or are
        continued) from now on, replacing what an earlier ``OpenSession`` gave; a running turn
        keeps the one it started with. It is held in memory only.

        Returns:
            The SessionState JSON object.

        ``interactive`` (``{"approvals", "approval_timeout"}``) is held like ``env``.

        A session new to this bridge's store is answered without waiting for its write's
        commit: the write rides in the next transaction (the session's first ``StartTurn``'s,
        usually), in queue order, so no turn of the session is durable without it; lost in a
        crash before that, it is the state the host holds and sends again when it opens the
        session again (revision 0 and the driver's initial data when it holds none). An
        existing session's change is committed before the answer.

        Raises:
            RevisionExhausted: the bridge's own copy is above ``MAX_OPEN_REVISION`` (the host's
                is checked when the payload is decoded).
            ApprovalsUnsupported: approvals on, and the driver cannot ask.
            ToolsUnsupported: host tools given, and the driver cannot offer them.
            BadRequest: the host tools are not of the shape ``hostTools`` takes, or one is
                named like one of the driver's own tools.
        """
        tools = _check_tools(self._driver, self._agent_id, session_id, interactive)
        approvals = bool(interactive and interactive.get("approvals"))
        if approvals and not getattr(self._driver, "supports_approvals", False):
            raise ApprovalsUnsupported(
                f"the {self._agent_id} agent cannot ask before it runs a tool: open the session "
                "with approvals off",
                sessionId=session_id,
            )
        with self._lock:
            self._check_open()
            session = self._get_session(session_id)
            new = session is None
            if session is None:
                if state is not None:
                    session = Session(session_id, state.revision, state.data)
                else:
                    session = Session(session_id, 0, self._initial_data())
                self._sessions[session_id] = session
            else:
                if session.revision > MAX_OPEN_REVISION:
                    raise RevisionExhausted(
                        f"session {session_id!r} is at revision {session.revision}: too little "
                        "room to grow; start a new session",
                        sessionId=session_id,
                        revision=session.revision,
                    )
                if state is not None and state.revision > session.revision:
                    session.revision, session.data = state.revision, state.data
                session.closed = False
            session.env = dict(env or {})
            session.approvals = approvals
            session.approval_timeout = (interactive or {}).get("approval_timeout") if approvals else None
            session.host_tools, session.tool_timeout = tools, (interactive or {}).get("tool_timeout")
            # Committed by this thread in wait() below (no wake of the writer; see submit),
            # or, for a session new to the store, by the next commit (see the docstring).
            ticket = self._store.submit(
                session.op(),
                interactive_op(session_id, session.approvals, session.approval_timeout),
                wake=False,
            )
            result = session.state().to_dict()
        if not new:
            self._store.wait(ticket, self._commit_timeout)
        return result

    def close_session(self, session_id: str) -> Dict[str, Any]:
        """``CloseSession``: mark the session closed (its turns keep running).

        Raises:
            SessionNotFound: no such session.
        """
        with self._lock:
            self._check_open()
            session = self._get_session(session_id)
            if session is None:
                raise SessionNotFound(f"no session {session_id!r}", sessionId=session_id)
            session.closed = True
            ticket = self._store.submit(session.op(), wake=False)  # committed in wait() below
            result = session.state().to_dict()
        self._store.wait(ticket, self._commit_timeout)
        self._tell_driver_closed(session_id)
        return result

    def _tell_driver_closed(self, session_id: str) -> None:
        # The driver may free what it keeps for the session (an agent process); the close is
        # recorded already, so a driver's failure here is logged, not the RPC's.
        hook = getattr(self._driver, "session_closed", None)
        if hook is None:
            return
        try:
            hook(session_id)
        except Exception:
            log.exception("the driver's session_closed(%r) failed", session_id)


    # ------------------------------------------------------------------ lookups (lock held)

    def _check_open(self) -> None:
        if self._closing:
            raise RuntimeError("the bridge is shutting down")

    def _moved_check(self, session_id: str) -> None:
        """Raises: SessionMoved: the session was restored elsewhere (``epoch``, ``to``)."""
        moved = self._moved.get(session_id)
        if moved is not None:
            epoch, to = moved
            raise SessionMoved(
                f"session {session_id!r} was restored elsewhere (epoch {epoch}, sandbox "
                f"{to.get('sandbox', '?')}): this bridge serves it no more",
                sessionId=session_id, epoch=epoch, to=to,
            )

    def _get_session(self, session_id: str) -> Optional[Session]:
        self._moved_check(session_id)
        session = self._sessions.get(session_id)
        if session is None:
            row = self._store.load_session(session_id)
            if row is not None:
                session = Session(row.session_id, row.revision, row.data, row.closed)
                # Not opened on this run yet: its turns continue asking as they did.
                session.approvals, session.approval_timeout = self._store.load_interactive(session_id)
                self._sessions[session_id] = session
        return session


    def _initial_data(self) -> Any:
        init = getattr(self._driver, "initial_state", None)
        data = init() if callable(init) else None
        return json.loads(_dumps(data))  # a JSON copy; raises TypeError for anything else

"""The bridge of a turn started under other options than its session's.

``Session.continue_turn`` reads such a turn from the bridge that runs it, found by its id's
state directory in the session's sandbox and reached with the session's token; later turns
run in the session's own bridge. When that bridge is gone, :class:`ForeignBridgeGone` tells
the turn iterator to run the turn again from its prompt in the session's own bridge.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import posixpath
import re
import threading
import time
from typing import Iterator, Optional

from ..state_dir import identity
from ..errors import BridgeLaunchError, BridgeMismatch, HarnessError, ProtocolError, TemplateError
from ..wire import rpcs
from ..wire.parts import HelloResult, TurnState
from . import launcher
from .channel import SessionChannel
from .connection import Connection

__all__ = ["ForeignBridge", "ForeignBridgeGone"]

log = logging.getLogger("bridge_client")

class ForeignBridgeGone(HarnessError):
    """Internal: the bridge of another session's options that runs a turn is gone (its
    state directory or its copy of the turn is lost, or it cannot be launched). The turn then
    runs again from its prompt in the session's own bridge; callers never see this error."""


_BRIDGE_ID = re.compile(f"[0-9a-f]{{{identity.BRIDGE_ID_LENGTH}}}")


class ForeignBridge:
    """The bridge of a turn started under other options than its session's.

    Found by its id's state directory in the session's sandbox, reached with the session's
    token, and relaunched with the session's command and arguments (and the agent options its
    ``launch.json`` records) when it does not answer. Only the one turn is read there; the
    session's own connection, idle timer and later turns are not touched. Its connection is
    closed when the turn ends, is suspended, or the session is released, and once it has gone
    unused for the session's ``idle_timeout`` (a read in progress is use). Its idle timer
    is a daemon thread (``bridge-client-idle-turn-<bridge id>``) that lives while the
    connection is open.

    Args:
        channel: the connection handling of the session that continues the turn.
        state: the turn's state (its ``bridge_id`` names the bridge).

    Raises:
        BridgeMismatch: ``state.bridge_id`` is not a bridge id.
    """

    def __init__(self, channel: SessionChannel, state: TurnState) -> None:
        if not _BRIDGE_ID.fullmatch(state.bridge_id):
            raise BridgeMismatch(f"the turn state names {state.bridge_id!r}, which is not a bridge id")
        self.bridge_id = state.bridge_id
        self._channel = channel
        self._agent_id = state.agent_id
        self._turn_session_id = state.session_id
        self._lock = threading.Lock()
        self._conn: Optional[Connection] = None
        self._hello: Optional[HelloResult] = None
        self._idle_timeout = channel.options.idle_timeout
        self._cond = threading.Condition(threading.Lock())  # guards _busy and _last_use
        self._busy = 0
        self._last_use = time.monotonic()

    @contextlib.contextmanager
    def use(self) -> Iterator[None]:
        """Count a read or a request in progress as use of the connection, so it is not closed as idle."""
        with self._cond:
            self._busy += 1
        try:
            yield
        finally:
            with self._cond:
                self._busy -= 1
                self._last_use = time.monotonic()
                self._cond.notify_all()

    @property
    def instance(self) -> Optional[str]:
        """The instance id of the bridge the current connection reaches (``None`` if none)."""
        hello = self._hello
        return hello.instance if hello is not None else None

    def _plan(self) -> launcher.LaunchPlan:
        own = self._channel.plan
        folder = identity.state_dir(own.sandbox.state_root, self.bridge_id)
        path = posixpath.join(folder, identity.LAUNCH_FILE)
        try:
            info = identity.parse_launch(launcher.read_state_file(own.sandbox, path))  # this user's own file
        except (OSError, ProtocolError) as exc:
            raise ForeignBridgeGone(f"bridge {self.bridge_id} has no usable launch file: {exc}") from None
        if info.bridge_id != self.bridge_id or info.agent_id != self._agent_id:
            raise ForeignBridgeGone(f"the launch file of bridge {self.bridge_id} names another bridge")
        return dataclasses.replace(
            own,
            agent_id=info.agent_id,
            bridge_id=info.bridge_id,
            agent_options=info.agent_options,
            bridge_idle_timeout=info.idle_timeout,
            bind=info.bind,
        )

    def connect(self, timeout: Optional[float] = None) -> Connection:
        """Return the open connection to the bridge, or make one (launching it if needed).

        Raises:
            ForeignBridgeGone: its state directory is gone or it cannot be launched.
            BridgeLaunchError: (``unwritable``) its state directory cannot be written (a full
                disk): the turn's log is still there, so the turn is not run again elsewhere.
            Unauthorized, SandboxGone: as for the session's own bridge.
        """
        with self._lock:
            self._channel.check_open()
            conn = self._conn
            if conn is not None and not conn.closed:
                return conn
            plan = self._plan()
            try:
                conn, hello = launcher.connect(plan, timeout=timeout)
            except (BridgeLaunchError, TemplateError) as exc:
                if isinstance(exc, BridgeLaunchError) and exc.unwritable:
                    raise  # its log is still there: not run again elsewhere
                first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise ForeignBridgeGone(f"bridge {self.bridge_id} cannot be launched: {first_line}") from exc
            try:
                self._open_session(conn)
            except BaseException:
                conn.close()
                raise
            self._conn, self._hello = conn, hello
            log.debug("turn's bridge %s reached (instance %s)", self.bridge_id, hello.instance)
        with self._cond:
            self._last_use = time.monotonic()
        name = f"bridge-client-idle-turn-{self.bridge_id[:8]}"
        threading.Thread(target=self._idle_loop, args=(conn,), name=name, daemon=True).start()
        return conn

    def _open_session(self, conn: Connection) -> None:
        """Give that bridge the session's environment for the turn's session there, as
        every new connection of the session's own bridge does: a relaunched bridge holds
        none, and the turn's unfinished step runs again there when the read asks for it. The
        bridge keeps its own copy of the session state (none is sent). Without an environment
        nothing is sent: that bridge's session stays as the turn left it."""
        env = self._channel.options.env
        if not env:
            return
        payload = {"sessionId": self._turn_session_id, "state": None, "env": env.revealed()}  # type: ignore[attr-defined]
        conn.call(rpcs.OPEN_SESSION.tag, payload, timeout=self._channel.options.request_timeout)

    def _idle_loop(self, conn: Connection) -> None:
        """Close ``conn`` once it has gone unused for ``idle_timeout``; end when it closes."""
        with self._cond:
            while self._conn is conn and not conn.closed:
                if self._busy:
                    self._cond.wait(1.0)
                    continue
                remaining = self._last_use + self._idle_timeout - time.monotonic()
                if remaining > 0:
                    self._cond.wait(min(remaining, 1.0))
                    continue
                break
            else:
                return
        log.debug("turn's bridge %s: idle for %g s, closing connection", self.bridge_id, self._idle_timeout)
        self.drop(conn)

    def drop(self, conn: Optional[Connection] = None) -> None:
        """Forget and close the connection (or only ``conn``, if it is not the current one)."""
        with self._lock:
            current = self._conn
            if conn is None or current is conn:
                self._conn = None
        if current is not None and (conn is None or current is conn):
            current.close()
        if conn is not None:
            conn.close()
        with self._cond:
            self._cond.notify_all()  # the idle timer sees the connection gone

    def close(self) -> None:
        """Close the connection. Idempotent."""
        self.drop()

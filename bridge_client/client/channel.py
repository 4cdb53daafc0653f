"""A session's connection handling: the one object that connects, resends, times out idle
connections and releases, used by the session, its turns and a turn's bridge of other options.

See :doc:`resilience`. :class:`SessionChannel` connects lazily, opens the session on every new
connection from the last state the bridge gave, runs a request again over a new connection
within the resend window, closes an unused connection after ``idle_timeout``, says when the
bridge cannot be reached (``BridgeUnavailable``), and keeps which turn of the session is being
read, by which thread. :class:`~.session.Session` owns one;
:class:`~.turn.Turn` and :class:`~.foreign.ForeignBridge` use it, so arrows point down.

Threads: the caller's threads; while a connection is open the session is watched by the
process's one idle watcher (:mod:`.idle_watch`, thread ``bridge-client-idle-watch``).
"""
from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any, Callable, ContextManager, Dict, Iterable, Iterator, List, Optional, Protocol, TypeVar

from ..errors import (
    BridgeLaunchError,
    BridgeUnavailable,
    ConnectionLost,
    HarnessError,
    MayHaveBeenReceived,
    SandboxGone,
    SessionReleased,
    TurnInProgress,
)
from ..options import CreateSessionOptions
from ..wire import rpcs
from ..wire.parts import HelloResult, SessionState
from . import forksafe, idle_watch, launcher
from .connection import Connection
from .resend import RETRYABLE, resend_policy

# Where the contract's rules live here (docs/contract.md): finding the bridge and restoring the
# session on every connection in connect(), connected while in use in use() and the idle timer,
# bounded resends in with_connection(), suspending in reading(), a turn's bridge of other
# options in the `link` of with_connection() and call(), a gone sandbox in unavailable().

__all__ = ["SessionChannel", "OtherBridge"]

log = logging.getLogger("bridge_client")

T = TypeVar("T")


class OtherBridge(Protocol):
    """A bridge other than the session's own (a turn's bridge of other options) that a
    request goes to: what
    :class:`~.foreign.ForeignBridge` offers the channel."""

    def connect(self, timeout: Optional[float] = None) -> Connection: ...

    def drop(self, conn: Optional[Connection] = None) -> None: ...

    def use(self) -> ContextManager[None]: ...


class SessionChannel:
    """The connection handling of one session (see the module docstring).

    Args:
        session_id: the session's id; bridge_id: its own bridge's id.
        plan: how to find or launch that bridge.
        options: the session's options (timeouts, resend window, environment, approvals).
        state: the session state to open the session from (``None``: a new session).

    Attributes:
        id, bridge_id, plan, options: as given.
        state: the last session state the bridge gave.
        released: True once the session was released or the bridge became unavailable.
        closing: set on release, to cut backoff pauses short.
    """

    def __init__(
        self,
        session_id: str,
        bridge_id: str,
        plan: launcher.LaunchPlan,
        options: CreateSessionOptions,
        state: Optional[SessionState],
    ) -> None:
        self.id = session_id
        self.bridge_id = bridge_id
        self.plan = plan
        self.options = options
        self.state = state
        # cond guards the fields below; no network I/O happens while it is held.
        self.cond = threading.Condition(threading.Lock())
        self.conn: Optional[Connection] = None
        self.hello: Optional[HelloResult] = None
        self._busy = 0
        self._last_use = time.monotonic()
        # Watched by the process's idle watcher while a connection is open: no thread of its
        # own, and no wake-up per use (a use only moves the deadline later).
        self._idle_watched = False
        self.released = False
        self.active_turn: Any = None
        self._active_owner: Optional[int] = None  # the thread that reads the active turn
        self._reading_thread: Optional[int] = None
        # Held while a connection is being made, so that two callers do not launch twice.
        self._connect_lock = threading.Lock()
        self.closing = threading.Event()
        self._ever_connected = False
        # The session's journal (an export file kept at each turn's end), when it keeps one:
        # called by a turn read to its end; named by the error of a sandbox that is gone.
        self.on_turn_end: Optional[Callable[[], None]] = None
        self.journal: Optional[str] = None
        forksafe.track(self)  # a forked child opens its own connection (_after_fork_in_child)

    @property
    def instance(self) -> Optional[str]:
        """The instance id of the bridge the current connection reaches (``None`` if none)."""
        hello = self.hello
        return hello.instance if hello is not None else None

    # ------------------------------------------------------------------ connection

    def check_open(self) -> None:
        """Raises: SessionReleased: the session was released."""
        if self.released:
            raise SessionReleased(f"session {self.id} was released")

    def connect(self, timeout: Optional[float] = None) -> Connection:
        """Return the open connection, or make one: find or launch the bridge, then open the
        session there from the last state. Caller's thread; may block.

        Args:
            timeout: seconds a launch may wait at most (the rest of a resend window).
        """
        with self._connect_lock:
            self.check_open()
            conn = self.conn
            if conn is not None and not conn.closed:
                self._start_idle_timer()  # (an interrupt may have cut the first start short)
                return conn
            # Every connection opened on the way lands in `made` as soon as it exists: whatever
            # is not handed over (a failure, another bridge, a KeyboardInterrupt at any point)
            # is closed below, so no reader thread or socket outlives this call.
            made: List[Connection] = []
            try:
                conn, hello = launcher.connect(self.plan, timeout=timeout, holder=made)
                payload: Dict[str, Any] = {
                    "sessionId": self.id,
                    "state": self.state.to_dict() if self.state else None,
                }
                env = self.options.env
                if env:  # on every new connection, so a restarted bridge has it again
                    payload["env"] = env.revealed()  # type: ignore[attr-defined]
                interactive = self.options.interactive_payload()
                if interactive is not None:  # approvals on: so is every new connection's session
                    payload["interactive"] = interactive
                value = conn.call(rpcs.OPEN_SESSION.tag, payload, timeout=self.options.request_timeout)
                state = SessionState.from_dict(value)
                with self.cond:
                    if self.released:
                        raise SessionReleased(f"session {self.id} was released")
                    _log_new_generation(self.id, self.bridge_id, self.hello, hello)
                    self.conn, self.hello, self.state = conn, hello, state
                    self._last_use = time.monotonic()
                    self._ever_connected = True
            finally:
                _close_all(c for c in made if c is not self.conn)
            log.debug("session %s opened on bridge %s (instance %s)", self.id, self.bridge_id, hello.instance)
            self._start_idle_timer()
            return conn

    def drop(self, conn: Optional[Connection] = None) -> None:
        """Forget the connection (all of it, or only if it is ``conn``) and close it."""
        with self.cond:
            current = self.conn
            if current is None or (conn is not None and current is not conn):
                current = None
            else:
                self.conn = None
        if current is not None:
            self._stop_idle_timer()  # nothing to watch until the next connection
            current.close()
        if conn is not None and conn is not current:
            conn.close()

    def unavailable(self, exc: BaseException) -> BridgeUnavailable:
        """The bridge cannot answer: release the session and say so with its state."""
        with self.cond:
            self.released = True
            self.active_turn = None
        self.closing.set()
        self.drop()
        self._stop_idle_timer()
        message = f"the bridge of session {self.id} cannot be reached: {exc}"
        if isinstance(exc, SandboxGone) and self.journal is not None:
            message += f"; restore it from its journal: bridge-client restore {self.journal} --sandbox NEW"
        error = BridgeUnavailable(message, self.state)
        error.journal = self.journal if isinstance(exc, SandboxGone) else None
        return error

    def with_connection(
        self,
        fn: Callable[[Connection], T],
        *,
        resend: bool = True,
        window: Optional[float] = None,
        link: Optional[OtherBridge] = None,
    ) -> T:
        """Run ``fn(connection)``; on ``ConnectionLost`` drop that connection and run it again
        on a new one, within the resend window. With ``resend=False`` a drop after the
        connection was made raises :class:`MayHaveBeenReceived`.

        Args:
            fn: what to do on the connection.
            resend: whether ``fn`` may be run again after a drop.
            window: seconds of resending (default ``resend_window``).
            link: the bridge of another session's options to use instead of the session's own.

        Raises:
            BridgeUnavailable: the window ran out or the sandbox is gone.
            SessionReleased: the session was released meanwhile.
            ForeignBridgeGone: ``link``'s bridge is gone.
            BridgeLaunchError: the first launch failed, or (``unwritable``) the bridge's state
                directory cannot be written.
        """
        self.check_open()
        window = self.options.resend_window if window is None else max(window, 0.0)
        started = time.monotonic()
        connect: Callable[..., Connection] = self.connect if link is None else link.connect
        drop: Callable[[Connection], None] = self.drop if link is None else link.drop

        def attempt() -> T:
            # Reconnecting, a launch may use what is left of the window, never more; the first
            # launch of a session gets its whole launch_timeout.
            left = max(window - (time.monotonic() - started), 0.05) if self._ever_connected else None
            try:
                conn = connect(timeout=left)
            except BridgeLaunchError as exc:
                if not self._ever_connected:
                    raise  # the first launch failed: the options or the sandbox are wrong
                if exc.unwritable:
                    # A full disk under the bridge: every launch fails so until someone frees
                    # space, so it is said now, not after the window (the turn reads on later).
                    raise
                # A bridge that answered before cannot be reached now: keep trying
                # within the window.
                first_line = str(exc).splitlines()[0]
                raise ConnectionLost(f"no bridge answers: {first_line}") from exc
            try:
                return fn(conn)
            except ConnectionLost as exc:
                drop(conn)
                if not resend:
                    raise MayHaveBeenReceived(
                        f"the connection dropped; the request may have arrived: {exc}"
                    ) from exc
                log.debug("session %s: connection lost, resending: %s", self.id, exc)
                raise

        try:
            try:
                return attempt()  # most calls: once, without building the policy
            except RETRYABLE as exc:  # what the policy would send again
                first: Optional[BaseException] = exc
            return self._resend(attempt, first, window - (time.monotonic() - started))
        except ConnectionLost as exc:
            if self.released:
                raise SessionReleased(f"session {self.id} was released") from exc
            raise self.unavailable(exc) from exc
        except SandboxGone as exc:
            raise self.unavailable(exc) from exc

    def _resend(self, attempt: Callable[[], T], first: Optional[BaseException], left: float) -> T:
        """The resend policy after a first attempt failed with ``first`` (a retryable error),
        ``left`` seconds of the window from now: the policy counts that failure as its first
        attempt, so its pauses and its stop are those of a policy run from the start."""

        def again() -> T:
            nonlocal first
            if first is not None:
                error, first = first, None
                raise error
            return attempt()

        return resend_policy(max(left, 0.0), self.closing)(again)

    def call(self, rpc: rpcs.Rpc, payload: Any, link: Optional[OtherBridge] = None) -> Any:
        """Send a request that does not stream and return its ``Success`` value (to ``link``'s
        bridge when given)."""
        timeout = self.options.request_timeout
        with self.use(), (link.use() if link is not None else contextlib.nullcontext()):
            return self.with_connection(
                lambda conn: conn.call(rpc.tag, payload, timeout=timeout), resend=rpc.resend, link=link
            )

    def release(self) -> Optional[SessionState]:
        """Close the session in the bridge when it can, close the connection, stop the idle
        timer, and return the last session state. Idempotent; never raises for a bridge
        that cannot be reached."""
        with self.cond:
            already = self.released
            self.released = True
            turn, self.active_turn = self.active_turn, None
        self.closing.set()
        if turn is not None:
            turn._close_stream()
        conn = self.conn
        if not already and conn is not None and not conn.closed:
            try:
                value = conn.call(
                    rpcs.CLOSE_SESSION.tag, {"sessionId": self.id}, timeout=self.options.request_timeout
                )
                self.state = SessionState.from_dict(value)
            except HarnessError as exc:
                log.debug("session %s: CloseSession failed: %s", self.id, exc)
        self.drop()
        self._stop_idle_timer()
        return self.state

    # ------------------------------------------------------------------ use and the turn read

    @contextlib.contextmanager
    def use(self) -> Iterator[None]:
        """Count a request or a read in progress as use of the connection (the idle timer
        waits while any is)."""
        with self.cond:
            self._busy += 1
        try:
            yield
        finally:
            with self.cond:
                self._busy -= 1
                # No wake-up of the idle timer: it looks at _last_use at its deadline.
                self._last_use = time.monotonic()

    @contextlib.contextmanager
    def reading(self, turn: Any) -> Iterator[None]:
        """Make ``turn`` the session's current turn while the caller's thread reads it.

        Raises:
            SessionReleased: the session was released.
            TurnInProgress: another thread is reading a turn of this session right now.
        """
        me = threading.get_ident()
        with self.cond:
            self.check_open()
            if self._reading_thread is not None and self._reading_thread != me:
                raise TurnInProgress(f"another thread is reading a turn of session {self.id}")
            previous = self.active_turn
            if (
                previous is not None
                and previous is not turn
                and not previous.done
                and self._active_owner != me
            ):
                raise TurnInProgress(
                    f"turn {previous.id} of session {self.id} belongs to another thread: let it finish, "
                    "or call session.suspend_turn() first"
                )
            self.active_turn = turn
            self._active_owner = me
            outer = self._reading_thread is None
            self._reading_thread = me
        if previous is not None and previous is not turn:
            previous._close_stream()  # the other turn is suspended: it keeps running
        try:
            with self.use():
                yield
        finally:
            if outer:
                with self.cond:
                    self._reading_thread = None

    def forget_turn(self, turn: Any) -> None:
        """``turn`` is no longer the session's current turn (if it was)."""
        with self.cond:
            if self.active_turn is turn:
                self.active_turn = None
                self._active_owner = None

    def _after_fork_in_child(self) -> None:
        """In a forked child (called by :mod:`.forksafe`): the parent's connection, threads
        and locks are not this process's. Forget the connection (its own hook closed this
        process's copy of the socket), and make new locks; the next use opens a connection of
        the child's own, and a turn being read resumes from its offset."""
        self.cond = threading.Condition(threading.Lock())
        self._connect_lock = threading.Lock()
        self.conn = None
        self._busy = 0
        self._idle_watched = False  # the child's watcher starts empty
        self._reading_thread = None

    # ------------------------------------------------------------------ idle timer

    def _start_idle_timer(self) -> None:
        with self.cond:
            if self._idle_watched or self.conn is None:
                return
            self._idle_watched = True
            due = self._last_use + self.options.idle_timeout
        try:
            idle_watch.WATCH.watch(self, due)
        except BaseException:  # an interrupt, or no thread: the next connect() tries again
            with self.cond:
                self._idle_watched = False
            raise

    def _stop_idle_timer(self) -> None:
        with self.cond:
            watched, self._idle_watched = self._idle_watched, False
        if watched:
            idle_watch.WATCH.forget(self)
            with self.cond:  # a connect() in another thread meanwhile: forget() took its watch too
                again = self._idle_watched and self.conn is not None
                due = self._last_use + self.options.idle_timeout
            if again:
                try:
                    idle_watch.WATCH.watch(self, due)
                except RuntimeError:  # no thread now: the next connect() watches it again
                    with self.cond:
                        self._idle_watched = False

    def idle_look(self) -> Optional[float]:
        """The idle watcher's look (its thread): close the connection once it has gone unused
        for ``idle_timeout`` seconds. Returns when to look again (``time.monotonic()``),
        or ``None`` when the connection is gone, the session released, or it was closed now."""
        timeout = self.options.idle_timeout
        with self.cond:
            if not self._idle_watched or self.conn is None or self.released:
                self._idle_watched = False
                return None
            now = time.monotonic()
            if self._busy:
                return now + timeout  # the use under way ends after now: not due before this
            due = self._last_use + timeout
            if due > now:
                return due
            conn, self.conn = self.conn, None
            self._idle_watched = False
            log.debug("session %s: idle for %g s, closing connection", self.id, timeout)
        conn.close()
        return None


def _log_new_generation(
    session_id: str, bridge_id: str, old: Optional[HelloResult], new: HelloResult
) -> None:
    """Say so when the bridge's store is not the one this session used before: it was
    damaged, emptied or lost writes, and the bridge started a fresh one (its log names the old
    file). The session goes on from this host's session state."""
    if old is None or old.generation is None or new.generation is None or old.generation == new.generation:
        return
    log.warning(
        "session %s: bridge %s has a new store (generation %s, was %s): its earlier store was "
        "damaged or lost writes (see its bridge.log); the session goes on from this host's state, "
        "and a turn of the old store runs again from its prompt",
        session_id,
        bridge_id,
        new.generation,
        old.generation,
    )


def _close_all(conns: Iterable[Connection]) -> None:
    """Close every connection, even when a KeyboardInterrupt arrives meanwhile (raised after)."""
    interrupted: Optional[BaseException] = None
    for conn in list(conns):
        try:
            conn.close()
        except BaseException as exc:  # noqa: B036 - close the rest first
            interrupted = interrupted or exc
    if interrupted is not None:
        raise interrupted

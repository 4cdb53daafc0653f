"""Session: one conversation with the agent behind a bridge.

See :doc:`concepts` ("Session") and :doc:`resilience`.

The session connects lazily, opens itself on every new connection from the last state the
bridge gave, sends dropped requests again within the resend window, closes an
unused connection after ``idle_timeout``, and hands out :class:`~.turn.Turn` iterators.

Threads: public methods run in the caller's thread; one daemon idle-timer thread
(``bridge-client-idle-<session>``) lives while a connection is open.
"""
from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, TypeVar

from ..bridge import identity
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
from ..options import BridgeOptions, CreateSessionOptions
from ..redacted import check_token
from ..sandbox.base import Sandbox
from ..wire import rpcs
from ..wire.parts import HelloResult, SessionState, StartTurnResult, TurnState
from . import forksafe, launcher
from .connection import Connection
from .foreign import ForeignBridge
from .resend import resend_policy

__all__ = ["Session"]

log = logging.getLogger("bridge_client")

T = TypeVar("T")


class Session:
    """A session of the agent behind a bridge, in one sandbox. Use :func:`create_session`.

    Attributes:
        id: the session id (``str``).
        bridge_id: the id of the session's own bridge (made from its options and the
            sandbox's token).
        sandbox: the sandbox the session works in.

    A context manager: leaving the ``with`` block calls :meth:`release`.
    """

    def __init__(
        self, options: BridgeOptions, session_options: CreateSessionOptions, sandbox: Sandbox
    ) -> None:
        self._options = options
        self._opts = session_options
        self.sandbox = sandbox
        # Checked where it is made: a malformed token would only show as refused upgrades.
        token = check_token(
            options.token(sandbox.id), f"the token BridgeOptions.token gave for sandbox {sandbox.id}"
        )
        self.bridge_id = identity.bridge_id(
            options.id, options.command, options.args, options.agent_options, token
        )
        resume = session_options.resume
        self.id: str = (
            resume.session_id if resume is not None else (session_options.session_id or uuid.uuid4().hex)
        )
        rpcs.check_id(self.id, "session_id")
        self._state: Optional[SessionState] = resume
        self._plan = launcher.LaunchPlan(
            sandbox=sandbox,
            agent_id=options.id,
            bridge_id=self.bridge_id,
            command=options.command,
            args=options.args,
            template=options.template,
            agent_options=options.agent_options,
            token=token,
            bridge_idle_timeout=options.bridge_idle_timeout,
            bind=options.bind,
            launch_timeout=session_options.launch_timeout,
            open_timeout=session_options.open_timeout,
            ping_interval=session_options.ping_interval,
            ping_timeout=session_options.ping_timeout,
            ca_bundle=session_options.ca_bundle,
        )
        # _cond guards the fields below; no network I/O happens while it is held.
        self._cond = threading.Condition(threading.Lock())
        self._conn: Optional[Connection] = None
        self._hello: Optional[HelloResult] = None
        self._busy = 0
        self._last_use = time.monotonic()
        self._idle_thread: Optional[threading.Thread] = None
        self._released = False
        self._active_turn: Any = None
        self._active_owner: Optional[int] = None  # the thread that reads the active turn
        self._reading_thread: Optional[int] = None
        # Held while a connection is being made, so that two callers do not launch twice.
        self._connect_lock = threading.Lock()
        self._closing = threading.Event()
        self._ever_connected = False
        forksafe.track(self)  # a forked child opens its own connection (_after_fork_in_child)

    # ------------------------------------------------------------------ properties

    @property
    def state(self) -> Optional[SessionState]:
        """The last session state the bridge gave (``None`` before the first connection of a
        new session). Keep it to resume the session elsewhere."""
        return self._state

    @property
    def connected(self) -> bool:
        """True while the session holds an open connection."""
        conn = self._conn
        return conn is not None and not conn.closed

    @property
    def instance(self) -> Optional[str]:
        """The instance id of the bridge the current connection reaches (``None`` if none)."""
        hello = self._hello
        return hello.instance if hello is not None else None

    @property
    def released(self) -> bool:
        """True once :meth:`release` was called or the bridge became unavailable."""
        return self._released

    # ------------------------------------------------------------------ turns

    def turn(self, prompt: str, turn_id: Optional[str] = None) -> "Turn":
        """Start a turn and return its iterator of parts.

        Sends ``StartTurn`` (safe to send twice) and reads the ``turn-start`` part, so
        ``turn.state`` is ready at once; the iterator yields ``turn-start`` first.

        One turn of a session is read at a time:

        - In the same thread, a turn left unfinished (a ``break`` out of its loop, an
          exception) is suspended by this call: it keeps running in its bridge, and iterating
          it again later resumes it from where it stopped (suspending the other). A ``break``
          cannot run code, so leaving a loop cannot suspend the turn by itself; the next read
          of another turn does.
        - From another thread, while a turn is being read or an unfinished turn belongs to
          another thread, this raises :class:`~bridge_client.errors.TurnInProgress`: let that
          turn finish, or call :meth:`suspend_turn` first. For turns in parallel, use one
          session per thread.

        Args:
            prompt: the prompt (``str``).
            turn_id: the turn's id (default: a random one); 1 to 128 characters of letters,
                digits, ``. _ : @ -``.

        Raises:
            SessionReleased: the session was released.
            TurnInProgress: another thread is reading a turn of this session, or holds an
                unfinished one (a turn left unfinished by this thread is suspended instead,
                never an error).
            Unauthorized, BridgeLaunchError, TemplateError: connecting failed.
            BridgeUnavailable: no bridge answered within the resend window.
            TurnConflict: ``turn_id`` was used with another prompt.
            TurnStalled: ``turn-start`` did not come within ``turn_stall_timeout``.
            BadRequest: the prompt is over 4 MiB of UTF-8, or ``turn_id`` is not a valid id.
        """
        from .turn import Turn

        if not isinstance(prompt, str):
            raise TypeError("prompt must be a str")
        rpcs.check_prompt(prompt)
        turn_id = rpcs.check_id(turn_id or uuid.uuid4().hex, "turn_id")
        turn = Turn(self, session_id=self.id, turn_id=turn_id, prompt=prompt)
        return self._begin(turn)

    def continue_turn(self, state: TurnState, steps: int = 0) -> "Turn":
        """Continue a turn from its state: start it again in its bridge (which continues it if
        it had not finished) and read it from its start, skipping the first ``steps`` steps.

        A turn of another bridge (``state.bridge_id`` differs from this session's: a session
        of other options) is read from that bridge, found by its id's state directory in this
        sandbox with this session's token, and relaunched there when it does not answer; later
        turns run in this session's own bridge. When that bridge is gone (its state directory
        or its copy of the turn is lost, or it cannot be launched), the turn runs again from
        its prompt in this session's own bridge, and the iterator yields a new ``turn-start``
        naming this bridge.

        Args:
            state: the turn's :class:`TurnState` (from ``suspend_turn()`` or its ``turn-start``).
            steps: complete steps the caller already has (>= 0).

        Raises:
            SessionReleased, TurnInProgress, BridgeUnavailable: as for :meth:`turn`.
            BridgeMismatch: ``state.bridge_id`` is not a bridge id.
        """
        from .turn import Turn

        if not isinstance(state, TurnState):
            raise TypeError("state must be a TurnState (TurnState.from_json)")
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError("steps must be an integer >= 0")
        link: Optional[ForeignBridge] = None
        if state.bridge_id != self.bridge_id:
            link = ForeignBridge(self, state)
        turn = Turn(
            self,
            session_id=state.session_id,
            turn_id=state.turn_id,
            prompt=state.prompt,
            after_step=steps,
            link=link,
        )
        turn._known_generation = state.generation  # never spliced with another store's log (B10)
        return self._begin(turn)

    def _begin(self, turn: "Turn") -> "Turn":
        """Make ``turn`` the current turn and read its turn-start; forget it if that fails."""
        with self._reading(turn):
            try:
                turn._start()
            except BaseException:
                self._forget_turn(turn)
                raise
        return turn

    def suspend_turn(self) -> Optional[TurnState]:
        """Stop reading the current turn and return its state; the turn keeps running in its
        bridge. Returns ``None`` when there is no current turn.

        Any thread may call it: the reading thread's loop ends at its next part
        (``StopIteration``) and keeps the parts it received; a new loop over the turn yields
        them and reads on (see :meth:`Turn.suspend`)."""
        turn = self._active_turn
        if turn is None:
            return None
        return turn.suspend()  # type: ignore[no-any-return]

    def cancel_turn(self) -> Optional[StartTurnResult]:
        """Ask the bridge to cancel the current turn; the turn's reader then receives
        ``turn-finish{finishReason: "cancelled"}``. Returns ``None`` without a current turn, or
        when its ``StartTurn`` is still on its way (the cancel follows it).

        Raises:
            SessionReleased: the session was released.
            BridgeUnavailable: the bridge cannot be reached within the resend window.
            TurnNotFound: the bridge does not know the turn.
        """
        turn = self._active_turn
        if turn is None:
            return None
        return turn.cancel()  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ release

    def release(self) -> Optional[SessionState]:
        """Close the session in the bridge when it can, close the connection, stop the idle
        timer, and return the last session state. Idempotent; never raises for a bridge
        that cannot be reached.
        """
        with self._cond:
            already = self._released
            self._released = True
            turn, self._active_turn = self._active_turn, None
        self._closing.set()
        if turn is not None:
            turn._close_stream()
        conn = self._conn
        if not already and conn is not None and not conn.closed:
            try:
                value = conn.call(
                    rpcs.CLOSE_SESSION.tag, {"sessionId": self.id}, timeout=self._opts.request_timeout
                )
                self._state = SessionState.from_dict(value)
            except HarnessError as exc:
                log.debug("session %s: CloseSession failed: %s", self.id, exc)
        self._drop()
        self._stop_idle_timer()
        return self._state

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.release()

    def __repr__(self) -> str:
        status = "released" if self._released else ("connected" if self.connected else "not connected")
        return f"<Session {self.id} bridge={self.bridge_id} {status}>"

    # ------------------------------------------------------------------ internals: connection

    def _check_open(self) -> None:
        if self._released:
            raise SessionReleased(f"session {self.id} was released")

    def _connect(self, timeout: Optional[float] = None) -> Connection:
        """Return the open connection, or make one: find or launch the bridge (C04), then open
        the session there from the last state (C07). Caller's thread; may block.

        Args:
            timeout: seconds a launch may wait at most (the rest of a resend window).
        """
        with self._connect_lock:
            self._check_open()
            conn = self._conn
            if conn is not None and not conn.closed:
                self._start_idle_timer()  # (an interrupt may have cut the first start short)
                return conn
            # Every connection opened on the way lands in `made` as soon as it exists: whatever
            # is not handed over (a failure, another bridge, a KeyboardInterrupt at any point)
            # is closed below, so no reader thread or socket outlives this call.
            made: List[Connection] = []
            try:
                conn, hello = launcher.connect(self._plan, timeout=timeout, holder=made)
                payload: Dict[str, Any] = {
                    "sessionId": self.id,
                    "state": self._state.to_dict() if self._state else None,
                }
                env = self._opts.env
                if env:  # on every new connection, so a restarted bridge has it again (C07)
                    payload["env"] = env.revealed()  # type: ignore[attr-defined]
                interactive = self._opts.interactive_payload()
                if interactive is not None:  # approvals on: so is every new connection's session
                    payload["interactive"] = interactive
                value = conn.call(rpcs.OPEN_SESSION.tag, payload, timeout=self._opts.request_timeout)
                state = SessionState.from_dict(value)
                with self._cond:
                    if self._released:
                        raise SessionReleased(f"session {self.id} was released")
                    _log_new_generation(self.id, self.bridge_id, self._hello, hello)
                    self._conn, self._hello, self._state = conn, hello, state
                    self._last_use = time.monotonic()
                    self._ever_connected = True
            finally:
                _close_all(c for c in made if c is not self._conn)
            log.debug("session %s opened on bridge %s (instance %s)", self.id, self.bridge_id, hello.instance)
            self._start_idle_timer()
            return conn

    def _drop(self, conn: Optional[Connection] = None) -> None:
        """Forget the connection (all of it, or only if it is ``conn``) and close it."""
        with self._cond:
            current = self._conn
            if current is None or (conn is not None and current is not conn):
                current = None
            else:
                self._conn = None
            self._cond.notify_all()
        if current is not None:
            current.close()
        if conn is not None and conn is not current:
            conn.close()

    def _unavailable(self, exc: BaseException) -> BridgeUnavailable:
        """C15: the bridge cannot answer; release the session and say so with its state."""
        with self._cond:
            self._released = True
            self._active_turn = None
        self._closing.set()
        self._drop()
        self._stop_idle_timer()
        return BridgeUnavailable(f"the bridge of session {self.id} cannot be reached: {exc}", self._state)

    def _with_connection(
        self,
        fn: Callable[[Connection], T],
        *,
        resend: bool = True,
        window: Optional[float] = None,
        link: Optional["ForeignBridge"] = None,
    ) -> T:
        """Run ``fn(connection)``; on ``ConnectionLost`` drop that connection and run it again
        on a new one, within the resend window (C08). With ``resend=False`` a drop after the
        connection was made raises :class:`MayHaveBeenReceived`.

        Args:
            fn: what to do on the connection.
            resend: whether ``fn`` may be run again after a drop.
            window: seconds of resending (default ``resend_window``).
            link: the bridge of another session's options to use (C14) instead of the
                session's own.

        Raises:
            BridgeUnavailable: the window ran out or the sandbox is gone (C15).
            SessionReleased: the session was released meanwhile.
            ForeignBridgeGone: ``link``'s bridge is gone (C14).
        """
        self._check_open()
        window = self._opts.resend_window if window is None else max(window, 0.0)
        policy = resend_policy(window, self._closing)
        started = time.monotonic()
        connect: Callable[..., Connection] = self._connect if link is None else link.connect
        drop: Callable[[Connection], None] = self._drop if link is None else link.drop

        def attempt() -> T:
            # Reconnecting, a launch may use what is left of the window, never more; the first
            # launch of a session gets its whole launch_timeout.
            left = max(window - (time.monotonic() - started), 0.05) if self._ever_connected else None
            try:
                conn = connect(timeout=left)
            except BridgeLaunchError as exc:
                if not self._ever_connected:
                    raise  # the first launch failed: the options or the sandbox are wrong
                # A bridge that answered before cannot be reached now (C15): keep trying
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
            return policy(attempt)
        except ConnectionLost as exc:
            if self._released:
                raise SessionReleased(f"session {self.id} was released") from exc
            raise self._unavailable(exc) from exc
        except SandboxGone as exc:
            raise self._unavailable(exc) from exc

    def _call(self, rpc: rpcs.Rpc, payload: Any, link: Optional["ForeignBridge"] = None) -> Any:
        """Send a request that does not stream and return its ``Success`` value (to ``link``'s
        bridge when given, C14)."""
        timeout = self._opts.request_timeout
        with self._use(), (link.use() if link is not None else contextlib.nullcontext()):
            return self._with_connection(
                lambda conn: conn.call(rpc.tag, payload, timeout=timeout), resend=rpc.resend, link=link
            )

    # ------------------------------------------------------------------ internals: use and idle

    @contextlib.contextmanager
    def _use(self) -> Iterator[None]:
        """Count a request or a read in progress as use of the connection (C06)."""
        with self._cond:
            self._busy += 1
        try:
            yield
        finally:
            with self._cond:
                self._busy -= 1
                self._last_use = time.monotonic()
                self._cond.notify_all()

    @contextlib.contextmanager
    def _reading(self, turn: Any) -> Iterator[None]:
        """Make ``turn`` the session's current turn while the caller's thread reads it.

        Raises:
            SessionReleased: the session was released.
            TurnInProgress: another thread is reading a turn of this session right now.
        """
        me = threading.get_ident()
        with self._cond:
            self._check_open()
            if self._reading_thread is not None and self._reading_thread != me:
                raise TurnInProgress(f"another thread is reading a turn of session {self.id}")
            previous = self._active_turn
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
            self._active_turn = turn
            self._active_owner = me
            outer = self._reading_thread is None
            self._reading_thread = me
        if previous is not None and previous is not turn:
            previous._close_stream()  # the other turn is suspended: it keeps running (C11)
        try:
            with self._use():
                yield
        finally:
            if outer:
                with self._cond:
                    self._reading_thread = None

    def _forget_turn(self, turn: Any) -> None:
        with self._cond:
            if self._active_turn is turn:
                self._active_turn = None
                self._active_owner = None

    def _after_fork_in_child(self) -> None:
        """In a forked child (called by :mod:`.forksafe`): the parent's connection, threads
        and locks are not this process's. Forget the connection (its own hook closed this
        process's copy of the socket), and make new locks; the next use opens a connection of
        the child's own, and a turn being read resumes from its offset (C09)."""
        self._cond = threading.Condition(threading.Lock())
        self._connect_lock = threading.Lock()
        self._conn = None
        self._busy = 0
        self._idle_thread = None
        self._reading_thread = None

    def _start_idle_timer(self) -> None:
        with self._cond:
            if self._idle_thread is not None and self._idle_thread.is_alive():
                return
            thread = threading.Thread(
                target=self._idle_loop, name=f"bridge-client-idle-{self.id[:8]}", daemon=True
            )
            self._idle_thread = thread
        thread.start()

    def _stop_idle_timer(self) -> None:
        with self._cond:
            thread = self._idle_thread
            self._idle_thread = None
            self._cond.notify_all()
        # A thread whose start() an interrupt cut short may never have run: nothing to join.
        if thread is not None and thread is not threading.current_thread() and thread.ident is not None:
            thread.join(timeout=5.0)

    def _idle_loop(self) -> None:
        """Close the connection once it has gone unused for ``idle_timeout`` seconds (C06).
        Ends when the connection is gone or the session released."""
        me = threading.current_thread()
        timeout = self._opts.idle_timeout
        with self._cond:
            while self._idle_thread is me and self._conn is not None and not self._released:
                if self._busy:
                    self._cond.wait()
                    continue
                remaining = self._last_use + timeout - time.monotonic()
                if remaining > 0:
                    self._cond.wait(remaining)
                    continue
                conn, self._conn = self._conn, None
                log.debug("session %s: idle for %g s, closing connection", self.id, timeout)
                break
            else:
                conn = None
            if self._idle_thread is me:
                self._idle_thread = None
        if conn is not None:
            conn.close()


def _log_new_generation(
    session_id: str, bridge_id: str, old: Optional[HelloResult], new: HelloResult
) -> None:
    """Say so when the bridge's store is not the one this session used before (B10): it was
    damaged, emptied or lost writes, and the bridge started a fresh one (its log names the old
    file). The session goes on from this host's session state (C07)."""
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


from .turn import Turn  # noqa: E402  (Turn refers back to Session)

"""Session: one conversation with the agent behind a bridge.

See :doc:`concepts` ("Session") and :doc:`resilience`.

The session connects lazily, opens itself on every new connection from the last state the
bridge gave, sends dropped requests again within the resend window, closes an
unused connection after ``idle_timeout``, and hands out :class:`~.turn.Turn` iterators.
The connection handling is its :class:`~.channel.SessionChannel`, which its turns use too.

Threads: public methods run in the caller's thread; while a connection is open, the
process's one idle-watcher thread (``bridge-client-idle-watch``, shared by all sessions)
closes it once unused for ``idle_timeout``.
"""
from __future__ import annotations

import logging
import os
from typing import Any, Optional

from ..state_dir import identity
from ..driver_options import approvals_refused
from ..errors import ApprovalsUnsupported, HarnessError
from ..options import BridgeOptions, CreateSessionOptions
from ..paths import user_home
from ..redacted import check_token
from ..sandbox.base import Sandbox
from ..wire import rpcs
from ..wire.parts import HelloResult, SessionState, StartTurnResult, TurnState
from . import launcher, randoms
from .channel import SessionChannel
from .connection import Connection
from .foreign import ForeignBridge
from .session_export import write_export
from .turn import Turn

__all__ = ["Session"]

log = logging.getLogger("bridge_client")


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
            resume.session_id if resume is not None else (session_options.session_id or randoms.uuid4_hex())
        )
        rpcs.check_id(self.id, "session_id")
        plan = launcher.LaunchPlan(
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
        # Connecting, resending, the idle timer, release and the turn being read.
        self._channel = SessionChannel(self.id, self.bridge_id, plan, session_options, resume)
        # A built-in driver that cannot ask: refused at the first turn, before any launch (the
        # bridge would refuse OpenSession the same way, and then idle).
        self._refused = approvals_refused(options.args, options.id) if session_options.approvals else None
        journal = session_options.journal
        if journal is True:
            journal = os.path.join(user_home(), "journals", f"{self.id}.export")
        if isinstance(journal, str):
            self._channel.journal = os.path.abspath(journal)
            self._channel.on_turn_end = self._keep_journal

    # ------------------------------------------------------------------ properties

    @property
    def state(self) -> Optional[SessionState]:
        """The last session state the bridge gave (``None`` before the first connection of a
        new session). Keep it to resume the session elsewhere."""
        return self._channel.state

    @property
    def connected(self) -> bool:
        """True while the session holds an open connection."""
        conn = self._channel.conn
        return conn is not None and not conn.closed

    @property
    def instance(self) -> Optional[str]:
        """The instance id of the bridge the current connection reaches (``None`` if none)."""
        return self._channel.instance

    @property
    def released(self) -> bool:
        """True once :meth:`release` was called or the bridge became unavailable."""
        return self._channel.released

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
            ApprovalsUnsupported: approvals are on and the agent cannot ask: for a built-in
                driver that cannot (``echo``, ``codex``, ``gemini``, ``pi``) before anything
                is launched, for others by their bridge.
        """
        if not isinstance(prompt, str):
            raise TypeError("prompt must be a str")
        rpcs.check_prompt(prompt)
        turn_id = rpcs.check_id(turn_id or randoms.uuid4_hex(), "turn_id")
        turn = Turn(self._channel, session_id=self.id, turn_id=turn_id, prompt=prompt)
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
        if not isinstance(state, TurnState):
            raise TypeError("state must be a TurnState (TurnState.from_json)")
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError("steps must be an integer >= 0")
        link: Optional[ForeignBridge] = None
        if state.bridge_id != self.bridge_id:
            link = ForeignBridge(self._channel, state)
        turn = Turn(
            self._channel,
            session_id=state.session_id,
            turn_id=state.turn_id,
            prompt=state.prompt,
            after_step=steps,
            link=link,
        )
        turn._known_generation = state.generation  # never spliced with another store's log
        return self._begin(turn)

    def _begin(self, turn: "Turn") -> "Turn":
        """Make ``turn`` the current turn and read its turn-start; forget it if that fails.

        Raises:
            ApprovalsUnsupported: approvals are on and the session's built-in driver cannot
                ask (nothing is launched).
        """
        if self._refused is not None and not self.released:
            raise ApprovalsUnsupported(self._refused, sessionId=self.id)
        with self._channel.reading(turn):
            try:
                turn._start()
            except BaseException:
                # The caller never gets this Turn: nothing could take from or close a stream
                # it opened (an interrupt at the first take), so close it here.
                turn._close_stream()
                self._channel.forget_turn(turn)
                raise
        return turn

    def suspend_turn(self) -> Optional[TurnState]:
        """Stop reading the current turn and return its state; the turn keeps running in its
        bridge. Returns ``None`` when there is no current turn.

        Any thread may call it: the reading thread's loop ends at its next part
        (``StopIteration``) and keeps the parts it received; a new loop over the turn yields
        them and reads on (see :meth:`Turn.suspend`)."""
        turn = self._channel.active_turn
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
        turn = self._channel.active_turn
        if turn is None:
            return None
        return turn.cancel()  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ export

    def export(self, path: "str | os.PathLike[str]") -> str:
        """Write the session to one export file at ``path``, for :func:`~bridge_client.restore_session`
        in another sandbox (see :doc:`portable-sessions`).

        The file holds the session's state (for the ``openai`` driver: its messages) and every
        turn the bridge has committed, with its parts and checkpoints, as one snapshot; a turn
        still running is in it up to its last committed part (a restore continues it from its
        last completed step). Written atomically: ``path`` is the whole new file or what it
        was before, never half a file. Mode 0600.

        Args:
            path: where to write (``str`` or path-like); its folder must exist.

        Returns:
            The absolute path written (``str``).

        Raises:
            SessionReleased: the session was released.
            SessionMoved: the session was restored elsewhere.
            BridgeUnavailable, Unauthorized, BridgeLaunchError: connecting failed.
            OSError: the file cannot be written.
        """
        from ..wire import portable  # registers ExportSession in the catalogue

        body = self._channel.call(portable.EXPORT_SESSION, {"sessionId": self.id})
        return write_export(path, portable.check_body(body, f"the export of session {self.id}"))

    @property
    def journal(self) -> Optional[str]:
        """The path of the session's journal (``CreateSessionOptions(journal=...)``), an
        export file written again at the end of each turn read to its end; ``None`` when it
        keeps none."""
        return self._channel.journal

    def _keep_journal(self) -> None:
        """Write the journal after a turn's end; a failure is logged, never raised (the turn
        was read whole)."""
        path = self._channel.journal
        if path is None:
            return
        try:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            self.export(path)
        except (HarnessError, OSError) as exc:
            log.warning("session %s: its journal %s was not written: %s", self.id, path, exc)

    # ------------------------------------------------------------------ release

    def release(self) -> Optional[SessionState]:
        """Close the session in the bridge when it can, close the connection, stop the idle
        timer, and return the last session state. Idempotent; never raises for a bridge
        that cannot be reached.
        """
        return self._channel.release()

    def close(self) -> Optional[SessionState]:
        """The same as :meth:`release` (as files and sockets have ``close()``): close the
        session in the bridge when it can, close the connection, stop the idle timer, and
        return the last session state. Idempotent; never raises for a bridge that cannot be
        reached."""
        return self.release()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.release()

    def __repr__(self) -> str:
        status = "released" if self.released else ("connected" if self.connected else "not connected")
        return f"<Session {self.id} bridge={self.bridge_id} {status}>"

    # ------------------------------------------------------------------ internals
    # Read-only views of the channel's fields, for tests and tools that look inside a session.

    @property
    def _conn(self) -> Optional[Connection]:
        return self._channel.conn

    @property
    def _hello(self) -> Optional[HelloResult]:
        return self._channel.hello

    @property
    def _plan(self) -> launcher.LaunchPlan:
        return self._channel.plan

    @property
    def _active_turn(self) -> Any:
        return self._channel.active_turn

    def _connect(self, timeout: Optional[float] = None) -> Connection:
        """Return the open connection, or make one (see :meth:`SessionChannel.connect`)."""
        return self._channel.connect(timeout)

    def _call(self, rpc: rpcs.Rpc, payload: Any) -> Any:
        """Send a request that does not stream and return its ``Success`` value."""
        return self._channel.call(rpc, payload)

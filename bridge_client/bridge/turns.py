"""Sessions and turns inside the bridge: runs each turn in its own thread, appends its parts
to the store, wakes its readers, and continues turns a restart left unfinished.

:class:`TurnManager` answers the RPCs. Its parts, each a module (arrows point down):
:mod:`~bridge_client.bridge.sessions` (the session registry, OpenSession and CloseSession),
:mod:`~bridge_client.bridge.turn_runner` (the driver's thread, steps, attempts, the continue
after a restart, the cancel grace with :mod:`~bridge_client.bridge.cancel_grace`),
:mod:`~bridge_client.bridge.turn_sink` (parts into the store, the inline or group commit),
:mod:`~bridge_client.bridge.turn_log` (the read side: the committed log, readers, offsets) and
:mod:`~bridge_client.bridge.turn_life` (a turn's life as one table of states and moves).

- Stored first: a part reaches a reader only through :meth:`Turn.publish_segment`, which the
  thread that committed it (the store's writer, or the emitting thread itself) calls after the
  commit; that thread then pokes the turn's ReadTurn streams, which send at once if they may.
- Turns outlive readers: a turn runs in its thread whoever reads it; readers read the in-memory committed log
  (:meth:`Turn.take`) from their own offsets, as many at once as like.
- After a restart: :meth:`TurnManager.start_turn` on a turn that is in the store but unfinished and not
  running appends a ``step-reset`` for its unfinished step, resets the session state to the
  checkpoint of the last completed step, and runs the driver from there.

Lock order (never the other way round): ``TurnManager._lock`` → ``Turn.append_lock`` →
the store's lock. A committing thread (the store's writer, or one in
:meth:`~bridge_client.bridge.store.Store.commit_here`, which holds none of these) takes
``Turn.append_lock`` alone (to take the turn's buffered parts) and ``Turn._cond`` alone (to
publish), and pokes the streams holding neither.

Hot path: a driver's part is encoded once (:func:`~bridge_client.bridge.store.part_text`)
and that one string is the SQLite segment's content, the in-memory log's entry, and what
a Chunk carries; appending it takes the turn's lock only (no store lock, no object per part
beyond the string and its ``(step, attempt, type)``).
"""
from __future__ import annotations

import threading
import time
from typing import Any, Dict, Optional, Tuple

from ..errors import BadRequest, MessagesUnsupported, SessionNotFound, TurnConflict, TurnNotFound
from ..wire.parts import SessionState
from .approvals import TurnInteraction
from .host_calls import calls_of
from .sessions import Session
from .store import Ticket
from .turn_life import _Abandoned
from .turn_log import MAX_CHUNK_BYTES, MAX_CHUNK_VALUES, Reader, Turn
from .turn_log import _progress as _progress  # re-exported: tests import it from here
from .turn_runner import (
    CANCEL_GRACE,
    MAX_RUNNING_TURNS,
    STEP_RESET_REASON,
    TurnRunner,
    iso_now,
    log,
)
from .turn_runner import _outcome as _outcome  # re-exported: tests import it from here

__all__ = [
    "TurnManager",
    "Turn",
    "Session",
    "Reader",
    "iso_now",
    "STEP_RESET_REASON",
    "MAX_CHUNK_VALUES",
    "MAX_CHUNK_BYTES",
    "CANCEL_GRACE",
    "MAX_RUNNING_TURNS",
]

_MAX_CACHED_FINISHED = 32
"""Finished turns whose log stays in memory; older ones are read back from the store."""


JOIN_WAIT = 0.02
"""Seconds StartTurn waits, at most, for a new turn's thread to start running it before it
commits the turn's start."""


EMPTY_MESSAGE = "text is empty (or only white space): a message needs some text"
"""Why ``SendMessage`` refuses an empty text."""


class TurnManager(TurnRunner):
    """The bridge's sessions and turns: what the RPC handlers call.

    Args:
        store: the bridge's :class:`~bridge_client.bridge.store.Store`.
        driver: the agent.
        agent_id, bridge_id: carried in every ``turn-start``.
        on_running: called with the number of running turns whenever it changes (the idle
            watcher); called with a lock held, so it must only record and notify.
        commit_timeout: seconds an RPC waits for its writes to be committed.
        generation: the store's generation id, carried in every ``turn-start``.
        cancel_grace: seconds a driver has to end a cancelled turn before the bridge ends it.
        max_running: turns running at once, at most; beyond, ``StartTurn`` is ``Overloaded``.

    Every public method may be called from any thread.
    """


    # ------------------------------------------------------------------ RPCs

    def start_turn(self, session_id: str, turn_id: str, prompt: str) -> Dict[str, Any]:
        """``StartTurn``: start a new turn, or report on (or continue, after a restart) an existing one.
        Sending it twice is harmless.

        Returns:
            ``{"turnId", "status"}``: ``started``, ``running``, ``continued`` or ``finished``.

        Raises:
            SessionNotFound: no such session, or it is closed.
            TurnConflict: the turn id is taken by another prompt or another session.
            Overloaded: ``max_running`` turns run already, or no thread can be started (nothing
                was written; send it again later).
        """
        with self._lock:
            self._check_open()
            session = self._get_session(session_id)
            if session is None:
                raise SessionNotFound(
                    f"no session {session_id!r}: open it with OpenSession", sessionId=session_id
                )
            turn = self._get_turn(turn_id)
            ticket: Optional[Ticket] = None
            running: Optional[threading.Event] = None  # a new turn's thread runs it (set)
            if turn is None:
                # Only new turns need an open session: a turn that exists can always be
                # continued, also after the host that started it released its session.
                if session.closed:
                    raise SessionNotFound(
                        f"session {session_id!r} is closed: open it again", sessionId=session_id
                    )
                ticket, running = self._create(session, turn_id, prompt)
                status = "started"
            elif turn.session_id != session_id:
                raise TurnConflict(f"turn {turn_id!r} belongs to another session", turnId=turn_id)
            elif turn.prompt != prompt:
                raise TurnConflict(f"turn {turn_id!r} was started with another prompt", turnId=turn_id)
            elif turn.status in ("running", "finished"):
                status = turn.reported_status
            else:
                ticket = self._continue(turn, session)
                status = "continued"
            self._evict()
        if ticket is not None:
            if running is not None:
                # A new turn's start is committed here, once its thread runs the driver: this
                # thread gets the GIL back when that one first lets go of it (the driver waits,
                # or 0.5 ms pass), so what the driver emitted by then goes into the same
                # transaction (a first part costs one commit, not two) and no other thread
                # is woken to commit it. A thread that does not run within JOIN_WAIT is not
                # waited for. The answer still waits for the commit.
                running.wait(JOIN_WAIT)
            self._store.wait(ticket, self._commit_timeout)
        return {"turnId": turn_id, "status": status}

    def find_turn(self, session_id: str, turn_id: str) -> Turn:
        """Find a turn for ``ReadTurn`` (reading it back from the store when needed).

        Raises:
            SessionNotFound: no such session. TurnNotFound: no such turn in that session.
        """
        with self._lock:
            if self._get_session(session_id) is None:
                raise SessionNotFound(f"no session {session_id!r}", sessionId=session_id)
            turn = self._get_turn(turn_id)
            if turn is None or turn.session_id != session_id:
                raise TurnNotFound(f"no turn {turn_id!r} in session {session_id!r}", turnId=turn_id)
            return turn

    def cancel_turn(self, session_id: str, turn_id: str) -> Dict[str, Any]:
        """``CancelTurn``: set the driver's cancel event; the turn ends with
        ``turn-finish{finishReason: "cancelled"}``. A turn a restart left unfinished is
        finished as cancelled at once. A driver that has not ended the turn within
        ``cancel_grace`` seconds is abandoned: the bridge writes the ``turn-finish`` itself,
        nothing the driver emits later reaches the log, and the process groups it reported
        (:func:`~bridge_client.bridge.driver.process_group_started`) are killed.

        Returns:
            ``{"turnId", "status"}``: ``running`` (it is stopping) or ``finished``.

        Raises:
            TurnNotFound: no such turn in that session.
        """
        ticket: Optional[Ticket] = None
        with self._lock:
            self._check_open()
            turn = self._get_turn(turn_id)
            if turn is None or turn.session_id != session_id:
                raise TurnNotFound(f"no turn {turn_id!r} in session {session_id!r}", turnId=turn_id)
            if turn.status == "running":
                turn.cancelled.set()
                if turn.interaction is not None:
                    turn.interaction.wake()  # a driver waiting for an answer denies it (cancel)
                if turn.ctx is not None:
                    self._grace_watch.watch(turn, turn.ctx, self.cancel_grace)
            elif turn.status == "orphan":
                session = self._get_session(session_id)
                self._reset_open_step(turn, session)
                ticket = self._finish_turn(turn, None, "cancelled", None, None)
                turn.life.move("cancel")
                self._finished[turn.id] = None
            status = turn.reported_status
        if ticket is not None:
            self._store.wait(ticket, self._commit_timeout)
            self._tell_driver_finished(turn, ticket)
        return {"turnId": turn_id, "status": status}

    def answer_approval(
        self,
        session_id: str,
        turn_id: str,
        request_id: str,
        decision: str,
        message: Optional[str],
        by: str,
    ) -> Dict[str, Any]:
        """``AnswerApproval`` (see :mod:`~bridge_client.bridge.approvals`).

        Returns:
            The recorded answer ``{"requestId", "decision", "message", "by"}``.

        Raises:
            TurnNotFound, ApprovalNotFound, ApprovalExpired, ApprovalConflict.
        """
        _, interaction = self._interaction_of(session_id, turn_id)
        try:
            return interaction.answer(request_id, decision, message, by)
        except _Abandoned:
            raise RuntimeError("the bridge is shutting down") from None

    def send_message(self, session_id: str, turn_id: str, message_id: str, text: str) -> Dict[str, Any]:
        """``SendMessage``: record a user message for a turn (once per message id).

        Returns:
            ``{"messageId", "index"}``.

        Raises:
            BadRequest: an empty text (or only white space), or the id used with another text.
            TurnNotFound, MessagesUnsupported, TurnNotRunning.
        """
        if not text.strip():  # an agent would take it as an empty prompt (the shell: an empty command)
            raise BadRequest(EMPTY_MESSAGE, turnId=turn_id, messageId=message_id)
        if not getattr(self._driver, "supports_messages", False):
            raise MessagesUnsupported(
                f"the {self._agent_id} agent cannot take messages during a turn", turnId=turn_id
            )
        turn, interaction = self._interaction_of(session_id, turn_id)
        try:
            return interaction.send(message_id, text, self._appender(turn))
        except _Abandoned:
            raise RuntimeError("the bridge is shutting down") from None

    def claim_host_tool(
        self, session_id: str, turn_id: str, call_id: str, host_id: str, retry: bool
    ) -> Dict[str, Any]:
        """``ClaimHostTool`` (see :mod:`~bridge_client.bridge.host_calls`).

        Returns:
            ``{"callId", "status"}``: ``run``, ``answered`` (with ``result``) or ``expired``.

        Raises:
            TurnNotFound, HostToolCallNotFound.
        """
        turn, interaction = self._interaction_of(session_id, turn_id)
        try:
            return calls_of(interaction).claim(call_id, host_id, retry, self._appender(turn))
        except _Abandoned:
            raise RuntimeError("the bridge is shutting down") from None

    def answer_host_tool(
        self, session_id: str, turn_id: str, call_id: str, output: Any, is_error: bool
    ) -> Dict[str, Any]:
        """``AnswerHostTool``: record a host tool call's result (idempotent by call id).

        Returns:
            The recorded result ``{"callId", "toolName", "output", "isError", "by", "status"}``.

        Raises:
            TurnNotFound, HostToolCallNotFound.
        """
        turn, interaction = self._interaction_of(session_id, turn_id)
        try:
            return calls_of(interaction).answer(call_id, output, is_error, self._appender(turn))
        except _Abandoned:
            raise RuntimeError("the bridge is shutting down") from None

    def _interaction_of(self, session_id: str, turn_id: str) -> Tuple[Turn, TurnInteraction]:
        with self._lock:
            self._check_open()
            turn = self._get_turn(turn_id)
            if turn is None or turn.session_id != session_id or turn.interaction is None:
                raise TurnNotFound(f"no turn {turn_id!r} in session {session_id!r}", turnId=turn_id)
            return turn, turn.interaction

    @property
    def running(self) -> int:
        """How many turns run in this process now."""
        with self._lock:
            return self._running

    def close(self, timeout: float = 2.0) -> None:
        """Stop for shutdown: refuse new RPCs, leave running turns unfinished in the store
        (abandon their writes, set their cancel events so drivers stop; the next ``StartTurn``
        after a restart continues them), call the driver's ``close()``. Idempotent.

        Args:
            timeout: seconds to wait, in all, for turn threads to end.
        """
        with self._lock:
            if self._closing:
                return
            self._closing = True
            turns = [t for t in self._turns.values() if t.status == "running"]
        self._grace_watch.close()
        self._threads.close()  # idle turn threads end; busy ones once their turn returns
        for turn in turns:
            with turn.append_lock:
                turn.abandoned = True
            turn.cancelled.set()
            if turn.interaction is not None:
                turn.interaction.wake()
        closer = getattr(self._driver, "close", None)
        if callable(closer):
            try:
                closer()
            except Exception:
                log.exception("driver close() failed")
        deadline = time.monotonic() + timeout
        for turn in turns:
            if turn.thread is not None:
                turn.thread.join(max(0.0, deadline - time.monotonic()))

    # ------------------------------------------------------------------ lookups (lock held)

    def _get_turn(self, turn_id: str) -> Optional[Turn]:
        turn = self._turns.get(turn_id)
        if turn is not None:
            return turn
        row = self._store.load_turn(turn_id)
        if row is None:
            return None
        parts = self._store.load_parts(turn_id)
        finished = row.status == "finished" or (bool(parts) and parts[-1].type == "turn-finish")
        turn = Turn(
            row.turn_id,
            row.session_id,
            row.prompt,
            SessionState.from_dict(row.checkpoint),
            "finished" if finished else "orphan",
        )
        turn.load(parts)
        self._new_interaction(turn).load(parts, self._store.load_messages_taken(turn_id))
        assert turn.interaction is not None
        calls_of(turn.interaction).load(parts)
        turn.buffer = self._store.buffer(turn_id, turn, turn.append_lock, turn.next_index)
        self._turns[turn_id] = turn
        if finished:
            self._finished[turn_id] = None
        return turn

    def _evict(self) -> None:
        """Drop the oldest finished turns from memory (their logs stay in the store)."""
        while len(self._finished) > _MAX_CACHED_FINISHED:
            turn_id, _ = self._finished.popitem(last=False)
            turn = self._turns.get(turn_id)
            if turn is not None and not turn.complete:
                # Its turn-finish is not committed yet: keep it until it is.
                self._finished[turn_id] = None
                break
            self._turns.pop(turn_id, None)

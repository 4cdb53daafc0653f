"""Turn: the iterator of a turn's parts, which survives drops and bridge restarts.

See :doc:`concepts` ("Turn", "Offsets") and :doc:`resilience`.

The read is resumed inside ``__next__``, in the caller's thread: after a dropped connection
it goes on over a new one from the part after the last one received; when a new bridge
instance answers (the old one died), it sends ``StartTurn`` again, which continues the turn,
and reads on with ``afterStep`` = the complete steps received. A step read only in part
is then announced by ``step-reset`` and delivered again from its ``step-start``.

All of it lives here, in one place: :meth:`Turn._open` (where to read from) and
:meth:`Turn.__next__` (what was read).

Exactly once, even under ``KeyboardInterrupt``: a signal handler's exception can surface at
almost any bytecode of the reading thread. The read state therefore lives in one tuple,
``Turn._st`` (the batch of parts received, how many were yielded, the yielded steps, finish and
start, a :class:`_Received` with the read cursor, and how many text chunks count for
:meth:`Turn.text`), and it changes by replacing that tuple in
one attribute store. ``__next__`` stores the advanced position as its last act before
``return`` (on CPython >= 3.11 no interrupt is delivered between those two bytecodes; on 3.9
and 3.10 a ``try`` puts the old position back), and a batch received is published in one store
with the cursor that follows it. Work done before a store that an interrupt cut short is done
again (it is idempotent: a text delta's string is put at its place in the text list, a slice
assignment, whatever was there after it). Values
taken from the stream are kept (``Turn._raw``) until their batch is published, and their
conversion goes on from a checkpoint after an interrupt; values a take lost before they were
kept are read again: the stream counts as dirty from the take until the values are kept, and a
dirty stream is closed and read again from the cursor.
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, List, NamedTuple, Optional, Tuple

from ..errors import ConnectionLost, HarnessError, Overloaded, ProtocolError, SessionNotFound, TurnNotFound
from ..errors import TurnStalled
from ..wire import rpcs
from ..wire.parts import (
    ApprovalAnswer,
    ApprovalRequest,
    Part,
    SessionStateChanged,
    StartTurnResult,
    StepFinish,
    StepReset,
    TextDelta,
    TurnFinish,
    TurnStart,
    TurnState,
    UserMessage,
    part_from_dict,
)
from .connection import END, Connection, Stream, StreamClosed
from .interactive import RecordedAnswer, RequestRef, TurnApprovals
from .interactive import answer as _answer
from .interactive import say as _say
from .foreign import ForeignBridge, ForeignBridgeGone
from .resend import FIRST_BACKOFF, MAX_BACKOFF

if TYPE_CHECKING:
    from .session import Session

__all__ = ["Turn"]

log = logging.getLogger("bridge_client")


_CHECKPOINT = 16  # values converted between two checkpoints of a batch's conversion


class _Received(NamedTuple):
    """Where the read of a turn stands (the reading thread's; replaced whole, never mutated)."""

    batch: int  # the number of the batch in Turn._st (one more per batch received)
    offset: int  # where the next ReadTurn starts: parts received (not only yielded) count
    after_step: int  # the afterStep of the next ReadTurn
    steps: int  # complete steps received
    done: bool  # turn-finish received


class Turn:
    """The parts of one turn, as an iterator. Get one from ``Session.turn()`` or
    ``Session.continue_turn()``.

    Iterating yields :class:`~bridge_client.wire.parts.Part` values in log order,
    ``turn-start`` first and ``turn-finish`` last, each exactly once. Leaving a ``for`` loop
    early (``break``, an exception, ``KeyboardInterrupt``) does not cancel the turn: it keeps
    running in the bridge, and iterating again (or ``Session.continue_turn``) reads on.

    Attributes:
        id: the turn id (``str``).
        prompt: the turn's prompt (``str``).
        state: the turn's :class:`~bridge_client.wire.parts.TurnState`, ready as soon
            as ``turn()`` returns; store it (``state.to_json()``) to continue the turn
            elsewhere.
        status: what the bridge answered to ``StartTurn`` (``"started"``, ``"running"``,
            ``"continued"`` or ``"finished"``; see :doc:`protocol`, "Catalogue").
        steps: complete steps yielded so far (``int``; includes steps skipped by
            ``continue_turn(steps=k)``).
        finish: the ``turn-finish`` part once yielded, else ``None``.
        done: ``True`` once ``turn-finish`` was yielded.

    One turn of a session is read at a time: in the thread that reads it, starting another
    turn suspends this one (reading this one again resumes it); from another thread,
    ``turn()`` raises :class:`~bridge_client.errors.TurnInProgress` (see ``Session.turn``).
    """

    def __init__(
        self,
        session: "Session",
        *,
        session_id: str,
        turn_id: str,
        prompt: str,
        after_step: int = 0,
        link: Optional["ForeignBridge"] = None,
    ) -> None:
        self._session = session
        # The bridge of other options that runs this turn (C14), or None for the session's own.
        self._link = link
        self.id = turn_id
        self.prompt = prompt
        self._session_id = session_id
        self._state: Optional[TurnState] = None
        self.status: Optional[str] = None
        self._cancel_requested = False
        # The read state, replaced in one store (see the module docstring): (the parts of the
        # last batch received, how many of them were yielded, steps yielded, turn-finish
        # yielded, turn-start yielded, the cursor, text chunks yielded).
        self._st: Tuple[List[Part], int, int, Optional[TurnFinish], bool, _Received, int] = (
            [], 0, after_step, None, False, _Received(0, 0, after_step, after_step, False), 0
        )
        # Values taken from the stream and being converted: (their batch number, the values,
        # the parts converted so far), and a checkpoint of that conversion (batch number, parts
        # kept, values used, offset, steps, done) every _CHECKPOINT parts: after an interrupt
        # the conversion goes on from the checkpoint, it never starts over.
        self._raw: Optional[Tuple[int, List[Any], List[Part]]] = None
        self._checkpoint: Tuple[int, int, int, int, int, bool] = (-1, 0, 0, 0, 0, False)
        self._stream: Optional[Stream] = None
        self._stream_conn: Optional[Connection] = None
        # Streams opened for this turn and not closed (an interrupted open leaves one here).
        self._opened: List[Stream] = []
        # True from a take() on the stream until its values are published: values an interrupt
        # cut off in between are read again from the cursor over a new stream.
        self._dirty = False
        # Set by suspend() (any thread); the reading thread honours it (StopIteration).
        self._suspended = False
        self._instance: Optional[str] = None
        self._exhausted = False
        self._lost_since: Optional[float] = None
        # When the bridge first restarted since the last step completed (the crash-loop bound).
        self._restarted_since: Optional[float] = None
        # The text of the text deltas yielded: their strings (only the first _st[6] count: one
        # more may be a leftover of an interrupted __next__), and the runs of one (step,
        # attempt) as (step, attempt, position of its first string), for step-reset. No part
        # object is kept for text().
        self._texts: List[str] = []
        self._runs: List[Tuple[Optional[int], int, int]] = []
        self._adopted_state = False  # a bridge of other options gave this session a new state
        self._overloaded = 0.0  # the last pause after an Overloaded read (backoff, seconds)
        # The store generation of the turn state continue_turn() was given (B10), until a
        # turn-start says which log is read.
        self._known_generation: Optional[str] = None
        # Approval requests seen, and those the approve= policy has still to answer.
        self._approvals = TurnApprovals(getattr(session._opts, "approve", None))
        self._due = self._approvals.due

    # ------------------------------------------------------------------ public

    @property
    def state(self) -> TurnState:
        """The turn's :class:`TurnState`: what ``turn-start`` carries."""
        if self._state is None:  # pragma: no cover - _start reads turn-start first
            raise HarnessError("the turn has not started")
        return self._state

    @property
    def steps(self) -> int:
        """Complete steps yielded so far (``int``; includes steps skipped by
        ``continue_turn(steps=k)``)."""
        return self._st[2]

    @property
    def finish(self) -> Optional[TurnFinish]:
        """The ``turn-finish`` part once yielded, else ``None``."""
        return self._st[3]

    @property
    def done(self) -> bool:
        """True once ``turn-finish`` was yielded."""
        return self._exhausted or self._st[3] is not None

    def __iter__(self) -> "Turn":
        # A new loop over the turn reads on, also after a suspend from another thread (C11).
        self._suspended = False
        return self

    def __next__(self) -> Part:
        """Return the next part, resuming the read after drops and restarts.

        Raises:
            StopIteration: after ``turn-finish``.
            BridgeUnavailable: no bridge answered within the resend window.
            SessionReleased: the session was released.
            TurnInProgress: another thread is reading a turn of this session.
            TurnStalled: no part came within the session's ``turn_stall_timeout`` (carries the
                turn state; iterating again reads on).
            ProtocolError: the bridge sent something that is not a part.
        """
        if self._suspended:  # suspended from another thread: reading stops (C11)
            self._suspended = False
            raise StopIteration
        if self._due:  # requests yielded before: the approve= policy answers them now
            self._approvals.run_policy(self)
        st = self._st
        parts, taken = st[0], st[1]
        if taken >= len(parts):
            if st[5].done or self._exhausted:
                self._end()
            with self._session._reading(self):
                self._fill()
            st = self._st
            parts, taken = st[0], st[1]
            if taken >= len(parts):
                self._suspended = False
                raise StopIteration  # suspended from another thread: reading stops (C11)
        part = parts[taken]
        steps, finish, started, rx, ntext = st[2], st[3], st[4], st[5], st[6]
        # The bookkeeping: idempotent, as an interrupt before the store below makes it run again.
        kind = type(part)  # exact types (part_from_dict builds them)
        if kind is TextDelta:
            self._texts[ntext:] = (part.text,)  # type: ignore[attr-defined]
            runs = self._runs
            if not runs or runs[-1][0] != part.step or runs[-1][1] != part.attempt:
                runs.append((part.step, part.attempt, ntext))
            ntext += 1
        elif kind is StepFinish:
            steps += 1
        else:
            steps, finish, started, ntext = self._account(part, steps, finish, started, ntext)
        new = (parts, taken + 1, steps, finish, started, rx, ntext)
        try:
            self._st = new  # the part is yielded: nothing may run between this store and return
            return part
        except BaseException:  # pragma: no cover - only before Python 3.11 (see the module doc)
            self._st = st
            raise

    def _end(self) -> None:
        """Every part was yielded: close the read and raise ``StopIteration``."""
        self._exhausted = True
        self._close_stream()
        self._session._forget_turn(self)
        if self._adopted_state:
            # The session's own bridge opens the session again from the newer state on
            # its next connection (C07, C14).
            self._adopted_state = False
            self._session._drop()
        raise StopIteration

    def suspend(self) -> TurnState:
        """Stop reading and return the turn state; the turn keeps running in its bridge.

        May be called from any thread. It only closes the stream and sets a flag: the thread
        that reads the turn stops at its next part (``StopIteration``) and keeps what it
        received; iterating this turn again (a new ``for`` loop) yields those parts and reads
        on, each part once. ``continue_turn(state, steps=turn.steps)`` reads the rest from the
        bridge instead.
        """
        self._suspended = True  # before the close: a reader that opens a stream meanwhile sees it
        self._close_stream()
        self._session._forget_turn(self)
        log.debug("turn %s suspended after %d steps", self.id, self.steps)
        return self.state

    def cancel(self) -> Optional[StartTurnResult]:
        """Ask the bridge to cancel the turn (``CancelTurn``); keep iterating to read up to
        ``turn-finish{finishReason: "cancelled"}``.

        Returns:
            The bridge's answer, or ``None`` when ``StartTurn`` has not reached the bridge yet
            (``turn()`` is still running in another thread): the cancel is then sent as soon
            as it has.

        Raises:
            SessionReleased: the session was released.
            BridgeUnavailable: the bridge cannot be reached within the resend window.
            TurnNotFound: the bridge does not know the turn.
        """
        if self.status is None:
            self._cancel_requested = True
            if self.status is None:
                return None
        payload = {"sessionId": self._session_id, "turnId": self.id}
        value = self._session._call(rpcs.CANCEL_TURN, payload, link=self._link)
        return StartTurnResult.from_dict(value)

    # ------------------------------------------------------------------ interactive turns

    @property
    def pending_approvals(self) -> List[ApprovalRequest]:
        """The approval requests yielded so far that have no answer yet (no
        ``approval-answer`` part yielded for them, their attempt not reset, the turn not
        finished), oldest first. It never reads: iterate the turn to see new requests and
        answers."""
        return list(self._approvals.pending.values())

    def approve(
        self, request: RequestRef, always: bool = False, message: Optional[str] = None
    ) -> RecordedAnswer:
        """Allow the tool call an approval request asks about (``AnswerApproval``).

        Safe to call twice, from any thread and any host holding the turn: the bridge records
        the first answer, and the same decision again gets that record back. Sent again over
        a new connection after a drop, within the resend window.

        Args:
            request: the :class:`~bridge_client.wire.parts.ApprovalRequest` part, or its
                request id (``str``).
            always: ``True`` answers ``allow-always``: the session remembers it for that
                tool name and later requests for the tool are allowed without asking (also
                after the bridge restarts).
            message: words for the agent, or ``None``.

        Returns:
            The :class:`~bridge_client.client.interactive.RecordedAnswer`.

        Raises:
            ApprovalConflict: the request was answered otherwise before (``.recorded`` is
                that answer). ApprovalExpired: the request can no longer be answered (its
                attempt was abandoned after a bridge restart, it timed out, the turn was
                cancelled or finished). ApprovalNotFound: the turn has no such request.
            BridgeUnavailable, SessionReleased: as for every request.
        """
        return _answer(self, request, "allow-always" if always else "allow-once", message)

    def deny(self, request: RequestRef, message: Optional[str] = None) -> RecordedAnswer:
        """Deny the tool call an approval request asks about; ``message`` tells the agent why.
        Idempotent and resent like :meth:`approve`, with the same errors."""
        return _answer(self, request, "deny", message)

    def say(self, text: str, message_id: Optional[str] = None) -> str:
        """Add a user message to the running turn (``SendMessage``): the bridge records it as a
        ``user-message`` part, in order, and the agent takes it when it can (at once, or at
        its next step).

        Args:
            text: the message (at most 1 MiB of UTF-8).
            message_id: its id (1 to 128 letters, digits, ``. _ : @ -``); default a random one.
                Sending the same id again adds nothing (resent safely after a drop).

        Returns:
            The message id.

        Raises:
            TurnNotRunning: the turn finished. MessagesUnsupported: the turn's agent cannot
                take messages. BadRequest: the same id was sent with another text, or a bad
                id or text. BridgeUnavailable, SessionReleased: as for every request.
        """
        return _say(self, text, message_id)

    def text(self) -> str:
        """The text of the text-delta parts yielded so far, with reset attempts removed.

        It never reads: iterate the turn to its end first (``for part in turn: ...``) for the
        whole text. Before the first part is yielded it is ``""``.
        """
        return "".join(self._texts[: self._st[6]])

    def __repr__(self) -> str:
        where = "done" if self.done else f"{self.steps} steps read"
        return f"<Turn {self.id} of session {self._session_id}: {where}>"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """IPython's display: the status and the text yielded so far (never reads)."""
        from .display import turn_text

        printer.text(repr(self) if cycle else turn_text(self))

    def _repr_html_(self) -> str:
        """Jupyter's display: the status and the text yielded so far, HTML-escaped."""
        from .display import turn_html

        return turn_html(self)

    # ------------------------------------------------------------------ the read

    def _start(self) -> None:
        """Send ``StartTurn`` and receive ``turn-start`` (called by the session)."""
        self._fill()
        parts = self._st[0]
        if not parts:
            raise HarnessError(f"turn {self.id} was suspended before it started")
        if self._state is None:
            raise ProtocolError(f"turn {self.id}: the first part is {parts[0].type}, not turn-start")

    def _bridge_instance(self) -> Optional[str]:
        """The instance id of the bridge this turn is read from now (``None``: not connected)."""
        return self._link.instance if self._link is not None else self._session.instance

    def _bridge_generation(self) -> Optional[str]:
        """The store generation of the bridge this turn is read from now (``None``: unknown)."""
        hello = self._link._hello if self._link is not None else self._session._hello
        return hello.generation if hello is not None else None

    def _check_generation(self) -> None:
        """B10: the bridge's store is of another generation than the one that holds this
        turn's log (it was emptied, damaged or replaced): never splice the two logs. The turn
        is read from the start of that store's log (a fresh run from the prompt, under a new
        ``turn-start``), as for a bridge of other options that is gone."""
        known = self._state.generation if self._state is not None else self._known_generation
        now = self._bridge_generation()
        if known is None or now is None or known == now:
            return
        log.warning(
            "turn %s: the bridge's store is of another generation (%s; the turn's log was in %s): "
            "its log is gone, so the turn runs again from its prompt, under a new turn-start",
            self.id,
            now,
            known,
        )
        self._set_cursor(offset=0, after_step=0, steps=0, done=False)

    def _start_turn(self, conn: Connection) -> None:
        payload = {"sessionId": self._session_id, "turnId": self.id, "prompt": self.prompt}
        try:
            value = conn.call(rpcs.START_TURN.tag, payload, timeout=self._session._opts.request_timeout)
        except (SessionNotFound, TurnNotFound) as exc:
            if self._link is None:
                raise
            raise ForeignBridgeGone(f"bridge {self._link.bridge_id} no longer has the turn: {exc}") from exc
        result = StartTurnResult.from_dict(value)
        if self._link is not None and result.status == "started":
            # The turn's bridge had lost it and started it afresh under its options: stop that
            # copy and run the turn in this session's own bridge (C14).
            try:
                conn.call(rpcs.CANCEL_TURN.tag, {"sessionId": self._session_id, "turnId": self.id},
                          timeout=self._session._opts.request_timeout)
            except HarnessError as exc:
                log.debug("turn %s: cancelling the fresh copy failed: %s", self.id, exc)
            raise ForeignBridgeGone(f"bridge {self._link.bridge_id} no longer had the turn")
        if self._instance is not None and result.status == "started":
            # The bridge had no record of the turn (its state was lost): it runs afresh
            # from its prompt, and the reader sees the new log from its turn-start (C14).
            log.debug("turn %s: runs again from its prompt", self.id)
            self._set_cursor(offset=0, after_step=0, steps=0)
        self.status = result.status
        self._instance = self._bridge_instance()
        if self._cancel_requested:
            self._cancel_requested = False
            conn.call(rpcs.CANCEL_TURN.tag, {"sessionId": self._session_id, "turnId": self.id},
                      timeout=self._session._opts.request_timeout)

    def _open(self, conn: Connection) -> Stream:
        """Open ``ReadTurn`` on ``conn`` from where the read stands (C09, C13)."""
        if self._instance != self._bridge_instance():
            if self._instance is not None:
                log.debug("turn %s: bridge restarted, starting the turn again", self.id)
                self._check_restart_bound()
                rx = self._st[5]
                self._set_cursor(after_step=rx.steps)
            self._check_generation()
            self._start_turn(conn)
        rx = self._st[5]
        # The stream is in self._opened before its request leaves: an interrupt cannot orphan it.
        return conn.stream(
            rpcs.READ_TURN.tag,
            {
                "sessionId": self._session_id,
                "turnId": self.id,
                "offset": rx.offset,
                "afterStep": rx.after_step,
            },
            holder=self._opened,
        )

    def _set_cursor(self, **changes: Any) -> None:
        """Replace fields of the cursor (one store; only between batches)."""
        st = self._st
        self._st = st[:5] + (st[5]._replace(**changes), st[6])

    def _check_restart_bound(self) -> None:
        """The crash-loop bound: a bridge that restarts again and again while no step of the
        turn completes gets ``resend_window`` seconds from its first restart, then the read
        raises ``BridgeUnavailable`` (C15). The parts a restart writes (``step-reset``, the
        repeated step's start) are not progress, so they do not restart the window.
        """
        now = time.monotonic()
        if self._restarted_since is None:
            self._restarted_since = now
            return
        spent = now - self._restarted_since
        if spent > self._session._opts.resend_window:
            if self._link is not None:
                self._link.close()
            raise self._session._unavailable(
                ConnectionLost(
                    f"the bridge restarted again and again for {spent:.1f} s "
                    f"while no step of turn {self.id} completed"
                )
            )

    def _run_again_here(self, why: BaseException) -> None:
        """C14: the turn's bridge of other options is gone: run the turn again from its prompt
        in the session's own bridge; the reader gets a new ``turn-start`` naming it."""
        link, self._link = self._link, None
        log.info("turn %s: %s; running it again from its prompt in its session's bridge", self.id, why)
        if link is not None:
            link.close()
        self._session_id = self._session.id
        st = self._st
        steps = st[2] if st[4] else 0
        rx = st[5]._replace(offset=0, after_step=0, steps=0, done=False)
        self._st = (st[0], st[1], steps, st[3], st[4], rx, st[6])
        self._instance = None
        self._restarted_since = self._lost_since = None

    def _fill(self) -> None:
        """Receive at least one part into the buffer, reconnecting as needed."""
        link = self._link
        if link is None:
            self._fill_parts()
        else:
            with link.use():  # a read in progress is use of the turn's bridge connection (C06)
                self._fill_parts()

    def _fill_parts(self) -> None:
        session = self._session
        stall = session._opts.turn_stall_timeout
        waiting_since = time.monotonic()  # the stall bound counts parts, never keepalive frames
        while self._st[1] >= len(self._st[0]):
            raw = self._raw
            if raw is not None:
                if raw[0] > self._st[5].batch:  # not yet published
                    self._convert(raw)
                self._raw = None
                continue
            stream = self._stream
            if stream is not None and self._dirty:
                # An interrupt cut a take() short: read again from the cursor (C09).
                self._stream = self._stream_conn = None
                stream.close()
                stream = None
            if stream is None:
                for old in self._opened[:]:  # streams an interrupt left open
                    old.close()
                    self._opened.remove(old)
                self._dirty = False
                window = session._opts.resend_window
                if self._lost_since is not None:
                    window -= time.monotonic() - self._lost_since
                conn_box: List[Connection] = []

                def open_on(conn: Connection) -> Stream:
                    conn_box[:] = [conn]  # noqa: B023 (called within this pass of the loop)
                    return self._open(conn)

                try:
                    stream = session._with_connection(open_on, window=window, link=self._link)
                except ForeignBridgeGone as exc:
                    self._run_again_here(exc)
                    continue
                self._stream, self._stream_conn = stream, conn_box[0]
            if self._suspended:
                # suspend() from another thread, which may have missed this new stream.
                self._close_stream()
                return
            try:
                self._dirty = True
                if stall is None:
                    values = stream.take()
                else:
                    values = stream.take(max(stall - (time.monotonic() - waiting_since), 0.0))
            except TimeoutError:
                self._dirty = False
                raise self._stalled(time.monotonic() - waiting_since) from None
            except StreamClosed:
                # Another thread suspended the turn or released the session: stop reading,
                # and leave the connection alone (a release may still be using it).
                self._dirty = False
                self._forget_stream(stream)
                session._check_open()
                return
            except ConnectionLost as exc:
                self._dirty = False
                log.debug(
                    "turn %s: connection lost at offset %d, resuming: %s", self.id, self._st[5].offset, exc
                )
                now = time.monotonic()
                if self._lost_since is None:
                    self._lost_since = now
                conn = self._stream_conn
                self._forget_stream(stream)
                if self._link is not None:
                    self._link.drop(conn)
                else:
                    session._drop(conn)
                if now - self._lost_since > session._opts.resend_window:
                    # Connections open but every read drops at once (a bridge that answers each
                    # with a defect, say): the window bounds that too (C08, C15).
                    if self._link is not None:
                        self._link.close()
                    raise session._unavailable(exc) from exc
                continue
            except (SessionNotFound, TurnNotFound) as exc:
                self._dirty = False
                if self._link is None:
                    raise
                self._forget_stream(stream)
                self._run_again_here(exc)
                continue
            except Overloaded as exc:
                # The bridge serves as many reads as it can (B09): read again after a pause,
                # within the resend window, on the same connection.
                self._dirty = False
                self._forget_stream(stream)
                now = time.monotonic()
                if self._lost_since is None:
                    self._lost_since = now
                if now - self._lost_since > session._opts.resend_window:
                    raise
                self._overloaded = min(MAX_BACKOFF, max(FIRST_BACKOFF, self._overloaded * 2))
                log.debug(
                    "turn %s: bridge overloaded, reading again in %.2f s: %s", self.id, self._overloaded, exc
                )
                session._closing.wait(self._overloaded)
                session._check_open()
                continue
            if values is END:
                self._dirty = False
                self._forget_stream(stream)
                if not self._st[5].done:
                    raise ProtocolError(f"turn {self.id}: the stream ended before turn-finish")
                return
            self._raw = (self._st[5].batch + 1, values, [])  # type: ignore[assignment]
            self._dirty = False

    def _stalled(self, seconds: float) -> TurnStalled:
        """C20: the driver sent no part within ``turn_stall_timeout``. The read ends (its
        stream is closed; the turn keeps running in its bridge and stays the session's
        current turn, so ``cancel_turn()`` reaches it); iterating again reads on."""
        self._close_stream()
        offset = self._st[5].offset
        log.info("turn %s: no part for %.1f s after offset %d; the read ends (turn_stall_timeout)",
                 self.id, seconds, offset)
        return TurnStalled(
            f"turn {self.id}: the driver sent no part for {seconds:.1f} s after part {offset} "
            f"(turn_stall_timeout is {self._session._opts.turn_stall_timeout:g} s); the turn goes on "
            "in its bridge: iterate it again, continue_turn(error.state), or cancel_turn()",
            state=self._state,
            seconds=seconds,
        )

    def _forget_stream(self, stream: Stream) -> None:
        """The stream ended: it is no longer this turn's."""
        if self._stream is stream:
            self._stream = self._stream_conn = None
        try:
            self._opened.remove(stream)
        except ValueError:
            pass

    def _convert(self, raw: Tuple[int, List[Any], List[Part]]) -> None:
        """Convert values taken from the stream to parts and publish them as the next batch.

        Parts converted are appended to ``raw``'s list, with a checkpoint of the cursor every
        ``_CHECKPOINT`` parts (one store): after an interrupt the conversion goes on from the
        last checkpoint (the parts after it are converted again), never from the start, so
        even a stream of interrupts cannot keep a big batch from getting through. Publishing
        is one store of ``Turn._st``.
        """
        seq, values, parts = raw
        rx = self._st[5]
        mark = self._checkpoint
        if mark[0] == seq:
            _, kept, pos, offset, steps, done = mark
            del parts[kept:]
        else:
            pos, offset, steps, done = 0, rx.offset, rx.steps, rx.done
            del parts[:]
        count = len(values)
        append = parts.append
        while pos < count:
            part = part_from_dict(values[pos])
            pos += 1
            if part.index < offset:
                continue  # already received (a resend overlapped)
            offset = part.index + 1
            kind = type(part)  # exact types (part_from_dict builds them): see __next__
            if kind is StepFinish:
                steps += 1
            elif kind is TurnStart and isinstance(part, TurnStart):  # (isinstance: for mypy)
                if self._state is not None and part.turn.turn_id != self.id:
                    raise ProtocolError(f"turn {self.id}: turn-start names turn {part.turn.turn_id}")
                self._state = part.turn
            elif kind is TurnFinish:
                done = True
            append(part)
            if not pos % _CHECKPOINT:
                self._checkpoint = (seq, len(parts), pos, offset, steps, done)
        if parts:
            self._lost_since = None
            self._overloaded = 0.0
        if steps > rx.steps or done:
            self._restarted_since = None
        st = self._st
        # One store publishes the batch and the cursor after it (the old batch was all yielded).
        self._st = (parts, 0, st[2], st[3], st[4], _Received(seq, offset, rx.after_step, steps, done), st[6])

    def _account(
        self, part: Part, steps: int, finish: Optional[TurnFinish], started: bool, ntext: int
    ) -> Tuple[int, Optional[TurnFinish], bool, int]:
        """Bookkeeping for a part the caller is about to get, other than a text delta or a
        step-finish: returns the new (steps, finish, started, text chunks). Idempotent (see
        ``__next__``)."""
        if isinstance(part, StepReset):
            dropped = (part.step, part.discarded_attempt)
            runs = self._runs
            ntext = min(ntext, len(self._texts))
            if any((s, a) == dropped for s, a, _ in runs):
                texts: List[str] = []
                kept: List[Tuple[Optional[int], int, int]] = []
                bounds = [r[2] for r in runs[1:]] + [ntext]
                for (s, a, first), end in zip(runs, bounds):
                    if (s, a) != dropped and first < end:
                        kept.append((s, a, len(texts)))
                        texts.extend(self._texts[first:end])
                self._texts, self._runs = texts, kept  # one store each; again: nothing dropped
                ntext = len(texts)
            self._approvals.seen(part)
        elif isinstance(part, SessionStateChanged):
            # Only this session's own state (a continued turn may belong to another session).
            if part.state.session_id == self._session.id:
                self._session._state = part.state
                if self._link is not None:
                    self._adopted_state = True
        elif isinstance(part, TurnFinish):
            finish = part
            self._approvals.seen(part)
        elif isinstance(part, (ApprovalRequest, ApprovalAnswer, UserMessage)):
            self._approvals.seen(part)
        elif isinstance(part, TurnStart):
            if part.index == 0 and started:
                # The turn runs again from its prompt (its bridge lost it, C14): a new log.
                self._texts, self._runs = [], []
                steps, ntext = 0, 0
                self._approvals.seen(part)
            started = True
        return steps, finish, started, ntext

    def _close_stream(self) -> None:
        """Stop reading: close the stream, and the connection to a bridge of other options."""
        stream, self._stream, self._stream_conn = self._stream, None, None
        if stream is not None:
            stream.close()
        for other in list(self._opened):  # any thread may call this: close, never remove
            other.close()
        link = self._link
        if link is not None:
            link.close()

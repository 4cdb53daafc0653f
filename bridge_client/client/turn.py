"""Turn: the iterator of a turn's parts, which survives drops and bridge restarts.

See :doc:`concepts` ("Turn", "Offsets") and :doc:`resilience`.

The read is resumed inside ``__next__``, in the caller's thread: after a dropped connection
it goes on over a new one from the part after the last one received; when a new bridge
instance answers (the old one died), it sends ``StartTurn`` again, which continues the turn,
and reads on with ``afterStep`` = the complete steps received. A step read only in part
is then announced by ``step-reset`` and delivered again from its ``step-start``.

Where to read from lives in :mod:`.turn_source` (``TurnSource._open``, the base class of
:class:`Turn`); what was read lives here (:meth:`Turn._convert` publishes a batch,
:meth:`Turn.__next__` yields its parts).

Exactly once, even under ``KeyboardInterrupt``: a signal handler's exception can surface at
almost any bytecode of the reading thread. The read state therefore lives in one tuple,
``Turn._st``, a :class:`~.read_state.ReadState` (the batch of parts received, how many were
yielded, the yielded steps, finish and start, a :class:`~.read_state.Cursor` with the read
cursor, and how many text chunks count for :meth:`Turn.text`), and it changes by replacing that
tuple in one attribute store. ``__next__`` stores the advanced position as its last act before
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
from typing import Any, List, Optional, Tuple

from ..errors import HarnessError, ProtocolError
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
)
from ..wire.host_parts import HostToolCall, HostToolResult
from ..wire.part_batch import parts_from_dicts
from .channel import SessionChannel
from .foreign import ForeignBridge
from .interactive import RecordedAnswer, RequestRef, TurnApprovals
from .interactive import answer as _answer
from .interactive import say as _say
from .read_state import CHECKPOINT_EVERY, Checkpoint, Cursor, ReadState
from .turn_source import TurnSource

__all__ = ["Turn"]

# ReadState's own constructor, without the keyword handling of a NamedTuple's __new__ (the
# per-part path: about a third of its cost).
_new_state = tuple.__new__

log = logging.getLogger("bridge_client")


class Turn(TurnSource):
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
        channel: SessionChannel,
        *,
        session_id: str,
        turn_id: str,
        prompt: str,
        after_step: int = 0,
        link: Optional[ForeignBridge] = None,
    ) -> None:
        super().__init__(
            channel, session_id=session_id, turn_id=turn_id, prompt=prompt, after_step=after_step, link=link
        )
        # The text of the text deltas yielded: their strings (only the first _st.texts count: one
        # more may be a leftover of an interrupted __next__), and the runs of one (step,
        # attempt) as (step, attempt, position of its first string), for step-reset. No part
        # object is kept for text().
        self._texts: List[str] = []
        self._runs: List[Tuple[Optional[int], int, int]] = []
        # (state, yielded, text chunks) after the text deltas yielded from that _st: one store
        # per delta instead of a new ReadState; it counts only while its state is _st (any new
        # _st, which every other part and every batch stores, folds it in or starts over).
        self._pos: Tuple[Any, int, int] = (None, 0, 0)
        self._adopted_state = False  # a bridge of other options gave this session a new state
        # Approval requests seen, and those the approve= policy has still to answer.
        self._approvals = TurnApprovals(
            getattr(channel.options, "approve", None), tuple(getattr(channel.options, "tools", ()))
        )
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
        return self._st.steps

    @property
    def finish(self) -> Optional[TurnFinish]:
        """The ``turn-finish`` part once yielded, else ``None``."""
        return self._st.finish

    @property
    def done(self) -> bool:
        """True once ``turn-finish`` was yielded."""
        return self._exhausted or self._st.finish is not None

    def __iter__(self) -> "Turn":
        # A new loop over the turn reads on, also after a suspend from another thread.
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
            BridgeLaunchError: the bridge died and cannot be launched again; at once when its
                state directory cannot be written (``unwritable``: a full disk): once there is
                space, iterating again reads on.
            ProtocolError: the bridge sent something that is not a part.
        """
        if self._suspended:  # suspended from another thread: reading stops, the turn runs on
            self._suspended = False
            raise StopIteration
        if self._due:  # requests yielded before: the approve= policy answers them now
            self._approvals.run_policy(self)
        st = self._st
        pos = self._pos
        # Where the read stands: a text delta moves only _pos, valid while it names this _st.
        if pos[0] is st:
            taken, ntext = pos[1], pos[2]
        else:
            taken, ntext = st.yielded, st.texts
        parts = st.parts
        if taken >= len(parts):
            if st.cursor.done or self._exhausted:
                self._end()
            if pos[0] is st:  # the position into the state first (one store), for the read
                self._st = st._replace(yielded=taken, texts=ntext)
            with self._channel.reading(self):
                self._fill()
            st = self._st
            pos = self._pos
            if pos[0] is st:  # pragma: no cover - a read publishes a new state
                taken, ntext = pos[1], pos[2]
            else:
                taken, ntext = st.yielded, st.texts
            parts = st.parts
            if taken >= len(parts):
                self._suspended = False
                raise StopIteration  # suspended from another thread: reading stops, the turn runs on
        part = parts[taken]
        # The bookkeeping: idempotent, as an interrupt before the store below makes it run again.
        kind = type(part)  # exact types (parts_from_dicts builds them)
        if kind is TextDelta:
            self._texts[ntext:] = (part.text,)  # type: ignore[attr-defined]
            runs = self._runs
            if not runs or runs[-1][0] != part.step or runs[-1][1] != part.attempt:
                runs.append((part.step, part.attempt, ntext))
            moved = (st, taken + 1, ntext + 1)
            try:
                self._pos = moved  # the part is yielded: nothing may run between this store and return
                return part
            except BaseException:  # pragma: no cover - only before Python 3.11 (see the module doc)
                self._pos = pos
                raise
        _, _, steps, finish, started, rx, _ = st
        if kind is StepFinish:
            steps += 1
        else:
            steps, finish, started, ntext = self._account(part, steps, finish, started, ntext)
        new = _new_state(ReadState, (parts, taken + 1, steps, finish, started, rx, ntext))
        try:
            self._st = new  # the part is yielded: nothing may run between this store and return
            return part
        except BaseException:  # pragma: no cover - only before Python 3.11 (see the module doc)
            self._st = st
            raise

    def _end(self) -> None:
        """Every part was yielded: close the read and raise ``StopIteration``."""
        first = not self._exhausted
        self._exhausted = True
        self._close_stream()
        self._channel.forget_turn(self)
        if self._adopted_state:
            # The session's own bridge opens the session again from the newer state on
            # its next connection, which restores the session.
            self._adopted_state = False
            self._channel.drop()
        hook = self._channel.on_turn_end
        if first and hook is not None:
            hook()  # the session's journal (from the newer state, after a drop); logs its failures
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
        self._channel.forget_turn(self)
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
        return StartTurnResult.from_dict(self._call(rpcs.CANCEL_TURN, payload))

    def _call(self, rpc: rpcs.Rpc, payload: Any) -> Any:
        """Send a request about this turn to its bridge (resent within the window when safe)."""
        return self._channel.call(rpc, payload, link=self._link)

    def _yielded(self) -> Tuple[ReadState, int, int]:
        """The read state with how many of its parts and text chunks were yielded (``_pos``
        folded in; one snapshot, so any thread may ask)."""
        st, pos = self._st, self._pos
        if pos[0] is st:
            return st, pos[1], pos[2]
        return st, st.yielded, st.texts

    def _unyielded(self) -> List[Part]:
        """The parts received and not yet yielded (the reading thread's; never reads)."""
        st, taken, _ = self._yielded()
        return st.parts[taken:]

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
            text: the message (at most 1 MiB of UTF-8, not empty nor only white space).
            message_id: its id (1 to 128 letters, digits, ``. _ : @ -``); default a random one.
                Sending the same id again adds nothing (resent safely after a drop).

        Returns:
            The message id.

        Raises:
            TurnNotRunning: the turn finished (a message of an id it took already is not
                refused: it returns the id). MessagesUnsupported: the turn's agent cannot
                take messages. BadRequest: an empty text (refused before anything is sent),
                the same id sent with another text, or a bad id or text.
                BridgeUnavailable, SessionReleased: as for every request.
        """
        return _say(self, text, message_id)

    def text(self) -> str:
        """The text of the text-delta parts yielded so far, with reset attempts removed.

        It never reads: iterate the turn to its end first (``for part in turn: ...``) for the
        whole text. Before the first part is yielded it is ``""``.
        """
        return "".join(self._texts[: self._yielded()[2]])

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
        parts = self._st.parts
        if not parts:
            raise HarnessError(f"turn {self.id} was suspended before it started")
        if self._state is None:
            raise ProtocolError(f"turn {self.id}: the first part is {parts[0].type}, not turn-start")

    def _convert(self, raw: Tuple[int, List[Any], List[Part]]) -> None:
        """Convert values taken from the stream to parts and publish them as the next batch.

        Parts converted are appended to ``raw``'s list, with a checkpoint of the cursor every
        ``CHECKPOINT_EVERY`` parts (one store): after an interrupt the conversion goes on from the
        last checkpoint (the parts after it are converted again), never from the start, so
        even a stream of interrupts cannot keep a big batch from getting through. Publishing
        is one store of ``Turn._st``.
        """
        seq, values, parts = raw
        rx = self._st.cursor
        mark = self._checkpoint
        if mark.batch == seq:
            _, kept, pos, offset, steps, done = mark
            del parts[kept:]
        else:
            pos, offset, steps, done = 0, rx.offset, rx.steps, rx.done
            del parts[:]
        count = len(values)
        append = parts.append
        while pos < count:
            # One segment, up to the next checkpoint: built in one call, then accounted.
            stop = min(count, pos - pos % CHECKPOINT_EVERY + CHECKPOINT_EVERY)
            built, run = parts_from_dicts(values, pos, stop)
            if run and built[0].index >= offset:
                # Deltas in order, all new (the stream's common case): nothing to look at per part.
                parts.extend(built)
                offset = built[-1].index + 1
            else:
                for part in built:
                    if part.index < offset:
                        continue  # already received (a resend overlapped)
                    offset = part.index + 1
                    kind = type(part)  # exact types (parts_from_dicts builds them): see __next__
                    if kind is StepFinish:
                        steps += 1
                    elif kind is TurnStart and isinstance(part, TurnStart):  # (isinstance: for mypy)
                        if self._state is not None and part.turn.turn_id != self.id:
                            raise ProtocolError(f"turn {self.id}: turn-start names turn {part.turn.turn_id}")
                        self._state = part.turn
                    elif kind is TurnFinish:
                        done = True
                    append(part)
            pos = stop
            self._checkpoint = Checkpoint(seq, len(parts), pos, offset, steps, done)
        if parts:
            self._lost_since = None
            self._overloaded = 0.0
        if steps > rx.steps or done:
            self._restarted_since = None
        st, _, ntext = self._yielded()
        # One store publishes the batch and the cursor after it (the old batch was all yielded).
        self._st = st._replace(
            parts=parts, yielded=0, texts=ntext, cursor=Cursor(seq, offset, rx.after_step, steps, done)
        )

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
            if part.state.session_id == self._channel.id:
                self._channel.state = part.state
                if self._link is not None:
                    self._adopted_state = True
        elif isinstance(part, TurnFinish):
            finish = part
            self._approvals.seen(part)
        elif isinstance(part, (ApprovalRequest, ApprovalAnswer, UserMessage, HostToolCall, HostToolResult)):
            self._approvals.seen(part)
        elif isinstance(part, TurnStart):
            if part.index == 0 and started:
                # The turn runs again from its prompt (its bridge lost it): a new log.
                self._texts, self._runs = [], []
                steps, ntext = 0, 0
                self._approvals.seen(part)
            started = True
        return steps, finish, started, ntext

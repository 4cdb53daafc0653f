"""Turn: the iterator of a turn's parts, which survives drops and bridge restarts (C09–C13).

The read is resumed inside ``__next__``, in the caller's thread: after a dropped connection
it goes on over a new one from the part after the last one received (C09); when a new bridge
instance answers (the old one died), it sends ``StartTurn`` again, which continues the turn,
and reads on with ``afterStep`` = the complete steps received (C13). A step read only in part
is then announced by ``step-reset`` and delivered again from its ``step-start``.

All of it lives here, in one place: :meth:`Turn._open` (where to read from) and
:meth:`Turn.__next__` (what was read).
"""
from __future__ import annotations

import logging
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Deque, List, Optional, Tuple

from ..errors import ConnectionLost, HarnessError, ProtocolError, SessionNotFound, TurnNotFound
from ..wire import rpcs
from ..wire.parts import (
    Part,
    SessionStateChanged,
    StartTurnResult,
    StepFinish,
    StepReset,
    TextDelta,
    TurnFinish,
    TurnStart,
    TurnState,
    part_from_dict,
)
from .connection import END, Connection, Stream, StreamClosed
from .foreign import ForeignBridge, ForeignBridgeGone

if TYPE_CHECKING:
    from .session import Session

__all__ = ["Turn"]

log = logging.getLogger("bridge_client")


class Turn:
    """The parts of one turn, as an iterator (C09-C13). Get one from ``Session.turn()`` or
    ``Session.continue_turn()``.

    Iterating yields :class:`~bridge_client.wire.parts.Part` values in log order,
    ``turn-start`` first and ``turn-finish`` last, each exactly once. Leaving a ``for`` loop
    early (``break``, an exception, ``KeyboardInterrupt``) does not cancel the turn: it keeps
    running in the bridge, and iterating again (or ``Session.continue_turn``) reads on (C11).

    Attributes:
        id: the turn id (``str``).
        prompt: the turn's prompt (``str``).
        state: the turn's :class:`~bridge_client.wire.parts.TurnState` (C10), ready as soon
            as ``turn()`` returns; store it (``state.to_json()``) to continue the turn
            elsewhere.
        status: what the bridge answered to ``StartTurn`` (``"started"``, ``"running"``,
            ``"continued"`` or ``"finished"``; docs/protocol.md, "Catalogue").
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
        self.steps = after_step
        self.finish: Optional[TurnFinish] = None
        self.status: Optional[str] = None
        self._cancel_requested = False
        # Where the next ReadTurn starts: parts received (not only yielded) count.
        self._offset = 0
        self._after_step = after_step
        self._steps_received = after_step
        self._buffer: Deque[Part] = deque()
        self._stream: Optional[Stream] = None
        self._stream_conn: Optional[Connection] = None
        self._instance: Optional[str] = None
        self._done_receiving = False
        self._exhausted = False
        self._lost_since: Optional[float] = None
        # When the bridge first restarted since the last step completed (the crash-loop bound).
        self._restarted_since: Optional[float] = None
        self._texts: List[Tuple[Optional[int], int, str]] = []
        self._yielded_start = False
        self._adopted_state = False  # a bridge of other options gave this session a new state

    # ------------------------------------------------------------------ public

    @property
    def state(self) -> TurnState:
        """The turn's :class:`TurnState` (C10): what ``turn-start`` carries."""
        if self._state is None:  # pragma: no cover - _start reads turn-start first
            raise HarnessError("the turn has not started")
        return self._state

    @property
    def done(self) -> bool:
        """True once ``turn-finish`` was yielded."""
        return self._exhausted or self.finish is not None

    def __iter__(self) -> "Turn":
        return self

    def __next__(self) -> Part:
        """Return the next part, resuming the read after drops and restarts.

        Raises:
            StopIteration: after ``turn-finish``.
            BridgeUnavailable: no bridge answered within the resend window (C15).
            SessionReleased: the session was released.
            TurnInProgress: another thread is reading a turn of this session.
            ProtocolError: the bridge sent something that is not a part.
        """
        if not self._buffer and (self._done_receiving or self._exhausted):
            self._exhausted = True
            self._close_stream()
            self._session._forget_turn(self)
            if self._adopted_state:
                # The session's own bridge opens the session again from the newer state on
                # its next connection (C07, C14).
                self._adopted_state = False
                self._session._drop()
            raise StopIteration
        if not self._buffer:
            with self._session._reading(self):
                self._fill()
            if not self._buffer:
                raise StopIteration  # suspended from another thread: reading stops (C11)
        part = self._buffer.popleft()
        self._account(part)
        return part

    def suspend(self) -> TurnState:
        """Stop reading and return the turn state; the turn keeps running in its bridge (C11).

        Parts received but not yet yielded are dropped: iterating this turn again, or
        ``continue_turn(state, steps=turn.steps)``, delivers them again.
        """
        self._close_stream()
        # Rewind the cursor to the first part not yielded: reading this turn again (or a
        # continue) delivers the rest, none lost (C09, C11).
        self._offset = self._next_unyielded_offset
        self._buffer.clear()
        self._steps_received = self.steps
        self._done_receiving = self._exhausted = self.finish is not None
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
            SessionReleased, BridgeUnavailable, TurnNotFound.
        """
        if self.status is None:
            self._cancel_requested = True
            if self.status is None:
                return None
        payload = {"sessionId": self._session_id, "turnId": self.id}
        value = self._session._call(rpcs.CANCEL_TURN, payload, link=self._link)
        return StartTurnResult.from_dict(value)

    def text(self) -> str:
        """The text of the text-delta parts yielded so far, with reset attempts removed."""
        return "".join(text for _, _, text in self._texts)

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
        if not self._buffer:
            raise HarnessError(f"turn {self.id} was suspended before it started")
        if self._state is None:
            raise ProtocolError(f"turn {self.id}: the first part is {self._buffer[0].type}, not turn-start")

    def _bridge_instance(self) -> Optional[str]:
        """The instance id of the bridge this turn is read from now (``None``: not connected)."""
        return self._link.instance if self._link is not None else self._session.instance

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
            self._offset = 0
            self._after_step = self._steps_received = 0
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
                self._after_step = self._steps_received
            self._start_turn(conn)
        return conn.stream(
            rpcs.READ_TURN.tag,
            {
                "sessionId": self._session_id,
                "turnId": self.id,
                "offset": self._offset,
                "afterStep": self._after_step,
            },
        )

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
        self._offset = 0
        self._after_step = self._steps_received = 0
        self._instance = None
        self._done_receiving = False
        self._restarted_since = self._lost_since = None
        if not self._yielded_start:
            self.steps = 0

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
        while not self._buffer:
            if self._stream is None:
                window = session._opts.resend_window
                if self._lost_since is not None:
                    window -= time.monotonic() - self._lost_since
                conn_box: List[Connection] = []

                def open_on(conn: Connection) -> Stream:
                    conn_box[:] = [conn]  # noqa: B023 (called within this pass of the loop)
                    return self._open(conn)

                try:
                    self._stream = session._with_connection(open_on, window=window, link=self._link)
                except ForeignBridgeGone as exc:
                    self._run_again_here(exc)
                    continue
                self._stream_conn = conn_box[0]
            try:
                values = self._stream.take()
            except StreamClosed:
                # Another thread suspended the turn or released the session: stop reading,
                # and leave the connection alone (a release may still be using it).
                self._stream = self._stream_conn = None
                session._check_open()
                return
            except ConnectionLost as exc:
                log.debug("turn %s: connection lost at offset %d, resuming: %s", self.id, self._offset, exc)
                if self._lost_since is None:
                    self._lost_since = time.monotonic()
                if self._link is not None:
                    self._link.drop(self._stream_conn)
                else:
                    session._drop(self._stream_conn)
                self._stream = self._stream_conn = None
                continue
            except (SessionNotFound, TurnNotFound) as exc:
                if self._link is None:
                    raise
                self._stream = self._stream_conn = None
                self._run_again_here(exc)
                continue
            if values is END:
                self._stream = self._stream_conn = None
                if not self._done_receiving:
                    raise ProtocolError(f"turn {self.id}: the stream ended before turn-finish")
                return
            self._receive(values)  # type: ignore[arg-type]

    def _receive(self, values: List[Any]) -> None:
        for value in values:
            part = part_from_dict(value)
            if part.index < self._offset:
                continue  # already received (a resend overlapped)
            self._offset = part.index + 1
            self._lost_since = None
            kind = type(part)  # exact types (part_from_dict builds them): isinstance on these
            # ABC-derived classes takes ~0.4 us per miss, and a delta missed all three
            if kind is StepFinish:
                self._steps_received += 1
                self._restarted_since = None
            elif kind is TurnStart and isinstance(part, TurnStart):  # (isinstance: for mypy)
                if self._state is not None and part.turn.turn_id != self.id:
                    raise ProtocolError(f"turn {self.id}: turn-start names turn {part.turn.turn_id}")
                self._state = part.turn
            elif kind is TurnFinish:
                self._done_receiving = True
                self._restarted_since = None
            self._buffer.append(part)

    @property
    def _next_unyielded_offset(self) -> int:
        return self._buffer[0].index if self._buffer else self._offset

    def _account(self, part: Part) -> None:
        """Bookkeeping for a part the caller is about to get."""
        if type(part) is TextDelta:
            self._texts.append((part.step, part.attempt, part.text))
        elif isinstance(part, StepFinish):
            self.steps += 1
        elif isinstance(part, StepReset):
            dropped = (part.step, part.discarded_attempt)
            self._texts = [t for t in self._texts if (t[0], t[1]) != dropped]
        elif isinstance(part, SessionStateChanged):
            # Only this session's own state (a continued turn may belong to another session).
            if part.state.session_id == self._session.id:
                self._session._state = part.state
                if self._link is not None:
                    self._adopted_state = True
        elif isinstance(part, TurnFinish):
            self.finish = part
        elif isinstance(part, TurnStart) and part.index == 0 and self._yielded_start:
            # The turn runs again from its prompt (its bridge lost it, C14): a new log.
            self._texts = []
            self.steps = 0
        if type(part) is TurnStart:
            self._yielded_start = True

    def _close_stream(self) -> None:
        """Stop reading: close the stream, and the connection to a bridge of other options."""
        stream, self._stream, self._stream_conn = self._stream, None, None
        if stream is not None:
            stream.close()
        link = self._link
        if link is not None:
            link.close()

"""Where a turn's parts come from: the receive side of :class:`~.turn.Turn`.

:class:`TurnSource` finds where the read stands and how to go on: it sends ``StartTurn`` again
when a new bridge instance answers (the old one died) and reads on with ``afterStep`` = the
complete steps received, runs the turn again from its prompt when its bridge of other options
is gone or the store is of another generation, bounds a bridge that restarts again and again
and a driver that sends nothing (``turn_stall_timeout``), and receives values over a stream,
reconnecting within the resend window after a drop. What it received is
handed to :meth:`TurnSource._convert`, which :class:`~.turn.Turn` implements: publishing a
batch and yielding its parts exactly once is the turn's (see :mod:`.turn`).

Every read-state change here is one store of ``_st`` (a :class:`~.read_state.ReadState`),
and only between batches.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Dict, List, Optional, Tuple

from ..errors import ConnectionLost, HarnessError, Overloaded, ProtocolError, SessionNotFound, TurnNotFound
from ..errors import BridgeLaunchError, TurnStalled
from ..wire import rpcs
from ..wire.parts import Part, StartTurnResult, TurnState
from .channel import SessionChannel
from .connection import END, Connection, Stream, StreamClosed
from .stream import Pending
from .foreign import ForeignBridge, ForeignBridgeGone
from .read_state import NO_CHECKPOINT, ReadState
from .resend import FIRST_BACKOFF, MAX_BACKOFF

__all__ = ["TurnSource"]

# Where the contract's rules live here (docs/contract.md): reading from an offset, also after
# the bridge died, in _open() and _fill_parts(); a turn's bridge of other options in
# _run_again_here() and _start_turn(); the store generation in _check_generation(); a gone
# sandbox in _check_restart_bound(); no endless wait in _stalled(); bounded resends in the
# resend window of _fill_parts().

log = logging.getLogger("bridge_client")


class TurnSource:
    """The receive side of a turn (see the module docstring); :class:`~.turn.Turn` is the
    iterator built on it. Only the turn's reading thread calls these methods, except
    :meth:`_close_stream` (any thread).

    Args:
        channel: the connection handling of the session that reads the turn.
        session_id: the id of the turn's session (another session's, for a continued turn).
        turn_id, prompt: the turn's.
        after_step: complete steps the caller already has.
        link: the bridge of other options that runs the turn, or ``None``.
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
        self._channel = channel
        # The bridge of other options that runs this turn, or None for the session's own.
        self._link = link
        self.id = turn_id
        self.prompt = prompt
        self._session_id = session_id
        self._state: Optional[TurnState] = None
        self.status: Optional[str] = None
        self._cancel_requested = False
        # The read state, replaced in one store (see the module docstring and ReadState).
        self._st = ReadState.first(after_step)
        # Values taken from the stream and being converted: (their batch number, the values,
        # the parts converted so far), and a Checkpoint of that conversion every
        # CHECKPOINT_EVERY parts: after an interrupt the conversion goes on from the
        # checkpoint, it never starts over.
        self._raw: Optional[Tuple[int, List[Any], List[Part]]] = None
        self._checkpoint = NO_CHECKPOINT
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
        self._overloaded = 0.0  # the last pause after an Overloaded read (backoff, seconds)
        # The store generation of the turn state continue_turn() was given, until a
        # turn-start says which log is read.
        self._known_generation: Optional[str] = None
        # ReadTurn goes right behind StartTurn (see _start_and_read) unless a bridge served the
        # two out of order; _unconfirmed is such a stream until something is taken from it.
        self._pipeline = True
        self._unconfirmed: Optional[Stream] = None

    def _convert(self, raw: Tuple[int, List[Any], List[Part]]) -> None:
        """Convert values taken from the stream and publish them as the next batch (the
        turn's: see ``Turn._convert``)."""
        raise NotImplementedError

    def _bridge_instance(self) -> Optional[str]:
        """The instance id of the bridge this turn is read from now (``None``: not connected)."""
        return self._link.instance if self._link is not None else self._channel.instance

    def _bridge_generation(self) -> Optional[str]:
        """The store generation of the bridge this turn is read from now (``None``: unknown)."""
        hello = self._link._hello if self._link is not None else self._channel.hello
        return hello.generation if hello is not None else None

    def _check_generation(self) -> None:
        """The bridge's store is of another generation than the one that holds this
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

    def _start_payload(self) -> Dict[str, Any]:
        return {"sessionId": self._session_id, "turnId": self.id, "prompt": self.prompt}

    def _start_turn(self, conn: Connection, sent: Optional[Pending] = None) -> None:
        """``StartTurn`` on ``conn`` (its answer to ``sent`` when :meth:`_start_and_read` sent
        it already), and what its answer means for the read."""
        timeout = self._channel.options.request_timeout
        try:
            if sent is None:
                value = conn.call(rpcs.START_TURN.tag, self._start_payload(), timeout=timeout)
            else:
                value = conn.answer(sent, rpcs.START_TURN.tag, timeout)
        except (SessionNotFound, TurnNotFound) as exc:
            if self._link is None:
                raise
            raise ForeignBridgeGone(f"bridge {self._link.bridge_id} no longer has the turn: {exc}") from exc
        result = StartTurnResult.from_dict(value)
        if self._link is not None and result.status == "started":
            # The turn's bridge had lost it and started it afresh under its options: stop that
            # copy and run the turn in this session's own bridge.
            try:
                conn.call(rpcs.CANCEL_TURN.tag, {"sessionId": self._session_id, "turnId": self.id},
                          timeout=self._channel.options.request_timeout)
            except HarnessError as exc:
                log.debug("turn %s: cancelling the fresh copy failed: %s", self.id, exc)
            raise ForeignBridgeGone(f"bridge {self._link.bridge_id} no longer had the turn")
        if self._instance is not None and result.status == "started":
            # The bridge had no record of the turn (its state was lost): it runs afresh
            # from its prompt, and the reader sees the new log from its turn-start.
            log.debug("turn %s: runs again from its prompt", self.id)
            self._set_cursor(offset=0, after_step=0, steps=0)
        self.status = result.status
        self._instance = self._bridge_instance()
        if self._cancel_requested:
            self._cancel_requested = False
            conn.call(rpcs.CANCEL_TURN.tag, {"sessionId": self._session_id, "turnId": self.id},
                      timeout=self._channel.options.request_timeout)

    def _open(self, conn: Connection) -> Stream:
        """Open ``ReadTurn`` on ``conn`` from where the read stands."""
        if self._instance != self._bridge_instance():
            if self._instance is not None:
                log.debug("turn %s: bridge restarted, starting the turn again", self.id)
                self._check_restart_bound()
                rx = self._st.cursor
                self._set_cursor(after_step=rx.steps)
            self._check_generation()
            return self._start_and_read(conn)
        return self._read(conn)

    def _read(self, conn: Connection) -> Stream:
        """Send ``ReadTurn`` from the cursor."""
        # The stream is in self._opened before its request leaves: an interrupt cannot orphan it.
        return conn.stream(rpcs.READ_TURN.tag, self._read_payload(), holder=self._opened)

    def _read_payload(self) -> Dict[str, Any]:
        rx = self._st.cursor
        return {"sessionId": self._session_id, "turnId": self.id, "offset": rx.offset,
                "afterStep": rx.after_step}

    def _start_and_read(self, conn: Connection) -> Stream:
        """``StartTurn``, then ``ReadTurn`` from where the read stands after its answer.

        The turn id is the host's, so the ``ReadTurn`` can go right behind the ``StartTurn``
        without waiting for its answer (one round trip less). That stream is used only when
        its answer says it asked for what the unpipelined read would: ``started`` with the
        cursor where it was (a new turn), ``running`` or ``finished``. Any other outcome closes
        it before anything is taken from it (another prompt's turn, ``TurnConflict``, is never
        read) and opens the read the answer calls for. A bridge that served the ``ReadTurn``
        first (it found no such turn yet) is read again from the cursor (see
        :meth:`_fill_parts`). Not for a turn of a bridge of other options (its answer decides
        whether that bridge is used at all).
        """
        if self._link is not None or not self._pipeline:
            self._start_turn(conn)
            return self._read(conn)
        asked = self._st.cursor
        # One frame for both: one write, and no preemption between two sends can separate
        # them (the bridge answers the pair in one frame only when it has both).
        sent, stream = conn.request_and_stream(
            rpcs.START_TURN.tag, self._start_payload(), rpcs.READ_TURN.tag, self._read_payload(), self._opened
        )
        try:
            self._start_turn(conn, sent)
        except BaseException:
            self._drop_unread(stream)
            raise
        rx = self._st.cursor
        if self.status == "continued" or (rx.offset, rx.after_step) != (asked.offset, asked.after_step):
            # The turn was continued (a bridge that did not serve the two in order could have
            # read the log before StartTurn reset its open step), or it runs again from its
            # prompt: read what the answer calls for.
            self._drop_unread(stream)
            return self._read(conn)
        self._unconfirmed = stream
        return stream

    def _drop_unread(self, stream: Stream) -> None:
        """Close a stream nothing was taken from, and forget it."""
        stream.close()
        self._forget_stream(stream)

    def _set_cursor(self, **changes: Any) -> None:
        """Replace fields of the cursor (one store; only between batches)."""
        st = self._st
        self._st = st._replace(cursor=st.cursor._replace(**changes))

    def _check_restart_bound(self) -> None:
        """The crash-loop bound: a bridge that restarts again and again while no step of the
        turn completes gets ``resend_window`` seconds from its first restart, then the read
        raises ``BridgeUnavailable``. The parts a restart writes (``step-reset``, the
        repeated step's start) are not progress, so they do not restart the window.
        """
        now = time.monotonic()
        if self._restarted_since is None:
            self._restarted_since = now
            return
        spent = now - self._restarted_since
        if spent > self._channel.options.resend_window:
            if self._link is not None:
                self._link.close()
            raise self._channel.unavailable(
                ConnectionLost(
                    f"the bridge restarted again and again for {spent:.1f} s "
                    f"while no step of turn {self.id} completed"
                )
            )

    def _run_again_here(self, why: BaseException) -> None:
        """The turn's bridge of other options is gone: run the turn again from its prompt
        in the session's own bridge; the reader gets a new ``turn-start`` naming it."""
        link, self._link = self._link, None
        log.info("turn %s: %s; running it again from its prompt in its session's bridge", self.id, why)
        if link is not None:
            link.close()
        self._session_id = self._channel.id
        st = self._st
        steps = st.steps if st.started else 0
        rx = st.cursor._replace(offset=0, after_step=0, steps=0, done=False)
        self._st = st._replace(steps=steps, cursor=rx)
        self._instance = None
        self._restarted_since = self._lost_since = None

    def _fill(self) -> None:
        """Receive at least one part into the buffer, reconnecting as needed."""
        link = self._link
        if link is None:
            self._fill_parts()
        else:
            with link.use():  # a read in progress is use of the turn's bridge connection
                self._fill_parts()

    def _fill_parts(self) -> None:
        session = self._channel
        stall = session.options.turn_stall_timeout
        waiting_since = time.monotonic()  # the stall bound counts parts, never keepalive frames
        while self._st.yielded >= len(self._st.parts):
            raw = self._raw
            if raw is not None:
                if raw[0] > self._st.cursor.batch:  # not yet published
                    self._convert(raw)
                self._raw = None
                continue
            stream = self._stream
            if stream is not None and self._dirty:
                # An interrupt cut a take() short: read again from the cursor.
                self._stream = self._stream_conn = None
                stream.close()
                stream = None
            if stream is None:
                for old in self._opened[:]:  # streams an interrupt left open
                    old.close()
                    self._opened.remove(old)
                self._dirty = False
                window = session.options.resend_window
                if self._lost_since is not None:
                    window -= time.monotonic() - self._lost_since
                conn_box: List[Connection] = []

                def open_on(conn: Connection) -> Stream:
                    conn_box[:] = [conn]  # noqa: B023 (called within this pass of the loop)
                    return self._open(conn)

                try:
                    stream = session.with_connection(open_on, window=window, link=self._link)
                except ForeignBridgeGone as exc:
                    self._run_again_here(exc)
                    continue
                except BridgeLaunchError as exc:
                    if exc.unwritable:
                        # The bridge cannot write its state directory (a full disk): said now,
                        # not after the window. A later read (space again) gets a whole window.
                        log.info("turn %s: %s", self.id, exc)
                        self._lost_since = self._restarted_since = None
                    raise
                stream.take_parts()  # deltas may come built (Turn._convert takes parts or JSON objects)
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
                session.check_open()
                return
            except ConnectionLost as exc:
                self._dirty = False
                log.debug(
                    "turn %s: connection lost at offset %d, resuming: %s",
                    self.id,
                    self._st.cursor.offset,
                    exc,
                )
                now = time.monotonic()
                if self._lost_since is None:
                    self._lost_since = now
                conn = self._stream_conn
                self._forget_stream(stream)
                if self._link is not None:
                    self._link.drop(conn)
                else:
                    session.drop(conn)
                if now - self._lost_since > session.options.resend_window:
                    # Connections open but every read drops at once (a bridge that answers each
                    # with a defect, say): the window bounds that too.
                    if self._link is not None:
                        self._link.close()
                    raise session.unavailable(exc) from exc
                continue
            except (SessionNotFound, TurnNotFound) as exc:
                self._dirty = False
                if stream is self._unconfirmed:
                    # A ReadTurn sent right behind StartTurn was served first, before the turn
                    # existed: read again from the cursor, and send the two one after the other
                    # from now on.
                    log.debug("turn %s: the bridge served ReadTurn before StartTurn: %s", self.id, exc)
                    self._pipeline = False
                    self._forget_stream(stream)
                    continue
                if self._link is None:
                    raise
                self._forget_stream(stream)
                self._run_again_here(exc)
                continue
            except Overloaded as exc:
                # The bridge serves as many reads as it can: read again after a pause,
                # within the resend window, on the same connection.
                self._dirty = False
                self._forget_stream(stream)
                now = time.monotonic()
                if self._lost_since is None:
                    self._lost_since = now
                if now - self._lost_since > session.options.resend_window:
                    raise
                self._overloaded = min(MAX_BACKOFF, max(FIRST_BACKOFF, self._overloaded * 2))
                log.debug(
                    "turn %s: bridge overloaded, reading again in %.2f s: %s", self.id, self._overloaded, exc
                )
                session.closing.wait(self._overloaded)
                session.check_open()
                continue
            if values is END:
                self._dirty = False
                self._forget_stream(stream)
                if not self._st.cursor.done:
                    raise ProtocolError(f"turn {self.id}: the stream ended before turn-finish")
                return
            self._raw = (self._st.cursor.batch + 1, values, [])  # type: ignore[assignment]
            self._dirty = False
            self._unconfirmed = None

    def _stalled(self, seconds: float) -> TurnStalled:
        """The driver sent no part within ``turn_stall_timeout``. The read ends (its
        stream is closed; the turn keeps running in its bridge and stays the session's
        current turn, so ``cancel_turn()`` reaches it); iterating again reads on."""
        self._close_stream()
        offset = self._st.cursor.offset
        log.info("turn %s: no part for %.1f s after offset %d; the read ends (turn_stall_timeout)",
                 self.id, seconds, offset)
        return TurnStalled(
            f"turn {self.id}: the driver sent no part for {seconds:.1f} s after part {offset} "
            f"(turn_stall_timeout is {self._channel.options.turn_stall_timeout:g} s); the turn goes on "
            "in its bridge: iterate it again, continue_turn(error.state), or cancel_turn()",
            state=self._state,
            seconds=seconds,
        )

    def _forget_stream(self, stream: Stream) -> None:
        """The stream ended: it is no longer this turn's."""
        if self._stream is stream:
            self._stream = self._stream_conn = None
        if self._unconfirmed is stream:
            self._unconfirmed = None
        try:
            self._opened.remove(stream)
        except ValueError:
            pass

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

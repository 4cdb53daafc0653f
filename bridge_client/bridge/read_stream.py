"""The ReadTurn stream sender: a turn's committed parts from an offset, sent as
Chunks with one Chunk in flight until the host's Ack (back-pressure), and the Exit right after
``turn-finish``, by whichever thread makes progress (the connection's, a committing turn's,
websockets' reader after an Ack), with a thread of its own only once a send must wait (the
Exit too: a committing thread never waits on a peer).

It sends through its connection (:class:`StreamConnection`, which
:class:`~bridge_client.bridge.connection.Connection` is).
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Dict, Optional, Protocol, Tuple

from ..wire.frames import Failure, Interrupted, RequestId, Success, encode_chunk_raw
from .dispatch import die
from .turns import Turn

__all__ = ["ReadStream", "StreamConnection", "MOVES"]

log = logging.getLogger("bridge_client.bridge.server")  # one logger for all the server's modules


class StreamConnection(Protocol):
    """What a stream uses of its connection: ``send`` may wait on the socket (False: the
    connection is closed); ``try_send`` sends only at once (``None``: it did not)."""

    number: int

    def send(self, text: str) -> bool:
        """Send one text frame; False when the connection is closed."""

    def try_send(self, text: str) -> Optional[bool]:
        """Send one text frame only if it goes at once; ``None`` when it did not."""

    def forget(self, stream: "ReadStream") -> None:
        """The stream ended: no longer in flight (before its Exit goes out)."""

    def send_exit(self, request_id: RequestId, value: Any) -> None:
        """Answer the request with ``value`` (a Success or Failure)."""

    def try_send_exit(self, request_id: RequestId, value: Any) -> Optional[bool]:
        """As :meth:`send_exit`, only if it goes at once (``try_send``); ``None`` when not."""



# Who sends for a stream, as one table (as h11 keys its readers by state): a thread that
# finds work takes the stream (IDLE -> SENDING) and alone moves its position; work that comes
# while it sends marks AGAIN, so it makes one more pass; ENDED is for good.
IDLE = "idle"
SENDING = "sending"
AGAIN = "sending, more to do"
ENDED = "ended"

# (state, event) -> (next state, whether the calling thread now acts: sends, or ends it).
#   work: an Ack, or new parts with no Chunk in flight. stop: Interrupt or the socket closed.
#   rest: the sender's pass found nothing more it may send (or a Chunk awaits its Ack).
#   more: the sender's pass ends with work that came meanwhile and no Chunk in flight.
#   end: the sender ends the stream (turn-finish sent, stopped, or failed).
MOVES: Dict[Tuple[str, str], Tuple[str, bool]] = {
    (IDLE, "work"): (SENDING, True),
    (SENDING, "work"): (AGAIN, False),
    (AGAIN, "work"): (AGAIN, False),
    (ENDED, "work"): (ENDED, False),
    (IDLE, "stop"): (ENDED, True),
    (SENDING, "stop"): (SENDING, False),  # the sender sees the reason and ends it
    (AGAIN, "stop"): (AGAIN, False),
    (ENDED, "stop"): (ENDED, False),
    (SENDING, "rest"): (IDLE, False),
    (AGAIN, "rest"): (IDLE, False),  # the Ack of the Chunk in flight brings the rest
    (AGAIN, "more"): (SENDING, True),
    (SENDING, "end"): (ENDED, True),
    (AGAIN, "end"): (ENDED, True),
    (ENDED, "end"): (ENDED, False),  # ended already (a failure raced it): nothing more
}

_PUMP = object()  # handed to the stream's own thread: go on sending (else: an Exit's value)

class ReadStream:
    """One ReadTurn: sends the turn's committed parts from ``offset`` as Chunks, one Chunk and
    then the host's Ack before the next, and ends with Exit right after ``turn-finish``.

    Sent by whichever thread makes progress, without a hand-off: the connection's thread sends
    the first Chunk (:meth:`start`); then the thread that committed new parts (:meth:`poke`: a
    paced driver's own thread, or the store's writer) or that read the Ack (:meth:`ack`:
    websockets' reader). Those send only what goes into the socket at once
    (``Connection.try_send``); anything else (a big Chunk, a full socket, another send
    under way) is handed to the stream's own daemon thread, started the first time it is
    needed. :meth:`stop` (Interrupt, or the connection closing) ends it from any thread. The
    Exit goes the same way: at once from such a thread, else from the stream's own (a thread
    that holds the store's commit must never wait on a peer, not even for the last frame).

    State, under ``_lock``: ``_state`` (who sends: a key of :data:`MOVES`), ``_inflight`` (a
    Chunk awaits its Ack: the one-Chunk window), ``_stop_reason``, and ``_handed`` (what the
    stream's own thread is to do next: go on sending, or send the Exit it holds).
    """

    def __init__(
        self, conn: StreamConnection, request_id: RequestId, turn: Turn, offset: int, after_step: int
    ) -> None:
        self.conn = conn
        self.request_id = request_id
        self.turn = turn
        self.offset = offset
        self.after_step = after_step
        self.position = offset
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._state = SENDING  # start() sends the first Chunks (from the offset)
        self._inflight = False
        self._stop_reason: Optional[str] = None
        self._handed: Any = None
        self._thread: Optional[threading.Thread] = None

    def _on(self, event: str) -> bool:
        """Apply ``event`` to the state (the caller holds ``_lock``); True when the calling
        thread now acts (sends, or ends the stream)."""
        self._state, acts = MOVES[(self._state, event)]
        if self._state is ENDED:
            self._cond.notify_all()
        return acts

    def start(self) -> None:
        """Start streaming: send what is committed from the offset (in the calling thread,
        the connection's, which may wait on the socket)."""
        self.turn.add_reader(self)
        self._guarded(False)

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the stream's thread (if it has one) to end."""
        thread = self._thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join(timeout)

    def ack(self) -> None:
        """The host took the last Chunk: send the next one now, if parts wait."""
        with self._lock:
            self._inflight = False
            if not self._on("work"):
                return
        self._guarded(True)

    def poke(self) -> None:
        """New parts are committed (see :class:`~bridge_client.bridge.turns.Reader`)."""
        with self._lock:
            if self._inflight and self._state is IDLE:
                return  # the Ack of the Chunk in flight sends them
            if not self._on("work"):
                return
        self._guarded(True)

    def stop(self, reason: str) -> None:
        """Stop streaming: ``interrupt`` answers Exit Failure[Interrupt]; ``closed`` sends nothing.
        The thread that sends for the stream (if one does) ends it; else this one."""
        with self._lock:
            if self._stop_reason is None:
                self._stop_reason = reason
            self._cond.notify_all()
            if not self._on("stop"):
                return
        self._stopped()

    def _guarded(self, inline: bool) -> None:
        """:meth:`_pump`, ending the stream with Die if it fails (a bug)."""
        try:
            self._pump(inline)
        except Exception as exc:
            log.exception("connection %d: ReadTurn %r failed", self.conn.number, self.request_id)
            with self._lock:
                self._state = ENDED
                self._cond.notify_all()
            self.turn.remove_reader(self)
            self.conn.forget(self)
            self._finish(die(f"{type(exc).__name__}: {exc}"), inline)

    def _pump(self, inline: bool) -> None:
        """Send what the host may get now; the calling thread holds the stream (SENDING), and
        gives it up here, or hands it to the stream's thread. ``inline``: a thread that must
        not wait on the socket."""
        turn = self.turn
        while True:
            if self._stop_reason is not None:
                break
            texts, position, done = turn.take(self.position, self.after_step)
            if texts:
                frame = encode_chunk_raw(self.request_id, texts)
                with self._lock:
                    self._inflight = True
                sent = self.conn.try_send(frame) if inline else self.conn.send(frame)
                if sent is None:  # not at once: the stream's own thread sends it
                    with self._lock:
                        self._inflight = False
                    if self._hand_off(_PUMP):
                        return
                    sent = self.conn.send(frame)  # no thread to be had: send it here
                    with self._lock:
                        self._inflight = True
                if not sent:
                    self.stop("closed")
                    break
            self.position = position
            if done:
                self._end(inline)
                return
            with self._lock:
                if self._stop_reason is not None:
                    continue  # a stop came while this thread held the stream: it ends it (above)
                if self._state is AGAIN and not self._inflight:
                    self._on("more")
                    continue
                self._on("rest")
                return
        with self._lock:  # stopped: this thread ends the stream, unless it has ended already
            ends = self._on("end")
        if ends:
            self._stopped(inline)

    def _hand_off(self, task: Any) -> bool:
        """Give the stream to its own thread, started now if it has none: ``_PUMP`` (it goes
        on sending, holding the stream), or an Exit's value (it only answers the request).
        False when no thread can be started (the caller goes on itself)."""
        with self._lock:
            self._handed = task
            self._cond.notify_all()
            if self._thread is not None:
                return True
            thread = threading.Thread(
                target=self._run, name=f"bridge-read-{self.conn.number}-{self.request_id}", daemon=True
            )
            self._thread = thread
        try:
            thread.start()
        except RuntimeError as exc:  # "can't start new thread": the caller goes on itself
            log.warning("connection %d: cannot start a stream's thread (%s)", self.conn.number, exc)
            with self._lock:
                self._thread = None
                self._handed = None
            return False
        return True

    def _end(self, inline: bool) -> None:
        """``turn-finish`` is sent: answer Exit Success."""
        with self._lock:
            self._on("end")
        self.turn.remove_reader(self)
        self.conn.forget(self)
        self._finish(Success(None), inline)

    def _stopped(self, inline: bool = False) -> None:
        """The end after :meth:`stop`, once (by the thread that moved the stream to ENDED)."""
        self.turn.remove_reader(self)
        self.conn.forget(self)
        if self._stop_reason == "interrupt":
            self._finish(Failure((Interrupted(),)), inline)

    def _finish(self, value: Any, inline: bool) -> None:
        """Answer the request with ``value``, the stream's last frame (after its last Chunk, by
        the thread that sent that). ``inline``: a thread that must not wait on the peer (the
        committing one, say) sends it only at once, else hands it to the stream's thread."""
        if inline:
            if self.conn.try_send_exit(self.request_id, value) is not None:
                return
            if self._hand_off(value):
                return
            # No thread to be had: sent here, as a Chunk would be.
        self.conn.send_exit(self.request_id, value)

    def _run(self) -> None:
        while True:
            with self._lock:
                while self._handed is None and self._state is not ENDED:
                    self._cond.wait()
                if self._handed is None:
                    # Gone under the lock: an Exit handed off after this starts a new thread.
                    self._thread = None
                    return
                task, self._handed = self._handed, None
            if task is not _PUMP:
                self.conn.send_exit(self.request_id, task)
                return
            self._guarded(False)

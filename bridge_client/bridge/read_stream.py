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
from typing import Any, Optional, Protocol

from ..wire.frames import Failure, Interrupted, RequestId, Success, encode_chunk_raw
from .dispatch import die
from .turns import Turn

__all__ = ["ReadStream", "StreamConnection"]

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

    State, under ``_lock``: ``_busy`` (a thread is sending for the stream: it alone moves
    ``position``), ``_again`` (work came while busy), ``_inflight`` (a Chunk awaits its Ack),
    ``_handoff`` (the stream's thread should take over), ``_ended`` (the end is under way),
    ``_final`` (the Exit's value, when the stream's thread is to send it).
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
        self._busy = True  # start() sends the first Chunks (from the offset)
        self._again = False
        self._inflight = False
        self._handoff = False
        self._ended = False
        self._stop_reason: Optional[str] = None
        self._final: Any = None
        self._thread: Optional[threading.Thread] = None

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
            if self._busy:
                self._again = True
                return
            if self._stop_reason is not None or self._ended:
                return
            self._busy = True
        self._guarded(True)

    def poke(self) -> None:
        """New parts are committed (see :class:`~bridge_client.bridge.turns.Reader`)."""
        with self._lock:
            if self._busy:
                self._again = True
                return
            if self._inflight or self._stop_reason is not None or self._ended:
                return
            self._busy = True
        self._guarded(True)

    def stop(self, reason: str) -> None:
        """Stop streaming: ``interrupt`` answers Exit Failure[Interrupt]; ``closed`` sends nothing.
        The thread that sends for the stream (if one does) ends it; else this one."""
        with self._lock:
            if self._stop_reason is None:
                self._stop_reason = reason
            self._cond.notify_all()
            if self._busy or self._ended:
                return
            self._busy = self._ended = True
        self._stopped()

    def _guarded(self, inline: bool) -> None:
        """:meth:`_pump`, ending the stream with Die if it fails (a bug)."""
        try:
            self._pump(inline)
        except Exception as exc:
            log.exception("connection %d: ReadTurn %r failed", self.conn.number, self.request_id)
            with self._lock:
                self._ended = True
                self._cond.notify_all()
            self.turn.remove_reader(self)
            self.conn.forget(self)
            self._finish(die(f"{type(exc).__name__}: {exc}"), inline)

    def _pump(self, inline: bool) -> None:
        """Send what the host may get now; the caller set ``_busy`` (which this clears, or
        hands to the stream's thread). ``inline``: a thread that must not wait on the socket."""
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
                    if self._hand_off():
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
                if self._again and not self._inflight:
                    self._again = False
                    continue
                self._again = False
                self._busy = False
                return
        with self._lock:  # stopped: this thread ends the stream
            self._busy = True
            ended, self._ended = self._ended, True
            self._cond.notify_all()
        if not ended:
            self._stopped(inline)

    def _hand_off(self, final: Any = None) -> bool:
        """Give the stream (``_busy`` and all) to its own thread, started now if it has none;
        with ``final``, the thread only answers the request with it (the Exit).
        False when no thread can be started (the caller sends itself)."""
        with self._lock:
            self._handoff = True
            self._final = final
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
                self._handoff = False
                self._final = None
            return False
        return True

    def _end(self, inline: bool) -> None:
        """``turn-finish`` is sent: answer Exit Success."""
        with self._lock:
            self._ended = True
            self._cond.notify_all()
        self.turn.remove_reader(self)
        self.conn.forget(self)
        self._finish(Success(None), inline)

    def _stopped(self, inline: bool = False) -> None:
        """The end after :meth:`stop`, once (whoever set ``_ended``)."""
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
                while not self._handoff and not self._ended:
                    self._cond.wait()
                if not self._handoff:
                    # Gone under the lock: an Exit handed off after this starts a new thread.
                    self._thread = None
                    return
                self._handoff = False
                final, self._final = self._final, None
            if final is not None:
                self.conn.send_exit(self.request_id, final)
                return
            self._guarded(False)

"""One WebSocket connection of the bridge: it reads frames (in the connection's own thread),
hands requests to the dispatch (:mod:`bridge_client.bridge.dispatch`), opens the ReadTurn
streams (:mod:`bridge_client.bridge.read_stream`) within their bounds, and sends every frame
through one send lock, with the at-once send (:meth:`Connection.try_send`) that lets a turn's
or the store's thread send a Chunk without waiting on the peer.

A bad frame is answered alone and never ends the connection.
"""
from __future__ import annotations

import fcntl
import logging
import socket
import struct
import sys
import termios
import threading
import time
from collections import deque
from typing import Any, Deque, Dict, List, Optional, Protocol, Tuple

from websockets.exceptions import ConnectionClosed

from ..errors import Overloaded, RpcError
from ..wire.frames import (
    Ack,
    Defect,
    Eof,
    Exit,
    Failure,
    FrameError,
    Interrupt,
    Ping,
    Pong,
    Request,
    RequestId,
    Success,
    encode,
    host_message,
    parse_frame,
)
from .dispatch import Dispatcher, die, fail, frame_text
from .read_stream import ReadStream
from .turns import TurnManager
from .ws_connection import WsConnection

__all__ = ["Connection", "INLINE_BYTES", "ServerView"]

log = logging.getLogger("bridge_client.bridge.server")  # one logger for all the server's modules
turn_log = logging.getLogger("bridge_client.bridge.turns")  # the turn runtime's (turn_runner)


class ServerView(Protocol):
    """What a connection uses of its :class:`~bridge_client.bridge.server.BridgeServer` (a
    protocol, so that the import points from the server down to its connections only)."""

    manager: TurnManager
    dispatcher: Dispatcher
    silence_timeout: float
    send_timeout: float
    max_streams: int
    max_streams_per_connection: int

    def take_stream(self) -> bool:
        """Count a new ReadTurn stream in the bridge's total; False when at ``max_streams``."""

    def give_stream(self) -> None:
        """A stream counted by :meth:`take_stream` ended."""


INLINE_BYTES = 64 * 1024
"""Largest Chunk that a thread other than the stream's own sends itself: in characters of JSON,
and in bytes of its frame (4 per non-ASCII character, at most) with what the socket holds."""

_OUTQ = getattr(termios, "TIOCOUTQ", None)  # SIOCOUTQ on Linux: bytes not yet sent


def _queued(fd: int) -> Optional[int]:
    """Bytes in the socket's send queue (not yet acknowledged by the peer's TCP); ``None``
    when the kernel cannot tell, 0 where there is no way to ask (the send timeout still
    bounds a send then)."""
    if _OUTQ is None or fd < 0:
        return 0  # pragma: no cover
    try:
        return int(struct.unpack("i", fcntl.ioctl(fd, _OUTQ, b"\0\0\0\0"))[0])
    except OSError:
        return None


_SO_MEMINFO = 55 if sys.platform.startswith("linux") else None  # not in Python's socket module
_MEMINFO = struct.Struct("9I")  # struct sk_meminfo: [3] the send buffer, [5] what its queue takes
_COST = 4.0
"""Bytes of the kernel's send buffer that a byte sent may take, at least (the truesize of its
segments): 1.4 on loopback, up to 3.6 measured for a peer of a tiny window and small segments.
The cost the queue shows (what it takes over what it holds) counts one and a half times."""


def _send_bound(sock: Any, queued: int) -> int:
    """The most the socket's send queue may hold, in bytes sent, for a send to go without
    waiting on the peer (at most :data:`INLINE_BYTES`), ``queued`` being what it holds now.

    The kernel takes a send while what its queue takes is below the send buffer
    (``SO_SNDBUF``), counted in the memory of its segments, not in bytes sent: a peer that
    advertises a tiny window and small segments makes that room well under 64 KiB (15 KB
    measured on loopback). 0 when the kernel cannot tell (nothing goes at once then);
    :data:`INLINE_BYTES` where there is no way to ask (the send timeout still bounds a send)."""
    if _SO_MEMINFO is None or sock is None:
        return INLINE_BYTES  # pragma: no cover - the send timeout still bounds a send
    try:
        info = _MEMINFO.unpack(sock.getsockopt(socket.SOL_SOCKET, _SO_MEMINFO, _MEMINFO.size))
    except (OSError, AttributeError, struct.error):
        return 0
    sndbuf, taken = info[3], info[5]
    cost = max(_COST, 1.5 * taken / queued) if queued > 0 else _COST
    return min(INLINE_BYTES, queued + max(0, int((sndbuf - taken) / cost)))


_UNREAD_SLACK = 1024
"""A margin added to what the WebSocket counts it wrote (its frames, pongs and closes: see
:attr:`WsConnection.written`) in the bound of what the socket may hold."""


def _frame_bytes(text: str) -> int:
    """An upper bound of the bytes of a text frame of ``text`` (UTF-8, header included)."""
    return (len(text) if text.isascii() else 4 * len(text)) + 14


_STREAM_JOIN_TIMEOUT = 2.0  # seconds a closed connection waits for its streams' threads in all


def _read_turn_of(data: Any, session_id: str, turn_id: str) -> Optional[Request]:
    """``data`` (a frame) as a ReadTurn request of that turn from its start (offset and
    afterStep 0), alone in its frame; else None."""
    try:
        objects = parse_frame(data)
    except FrameError:
        return None
    return _read_turn_message(objects[0], session_id, turn_id) if len(objects) == 1 else None


def _read_turn_message(obj: Any, session_id: str, turn_id: str) -> Optional[Request]:
    """``obj`` (a JSON value) as a ReadTurn request of that turn from its start; else None."""
    try:
        message = host_message(obj)
    except FrameError:
        return None
    if not isinstance(message, Request) or message.tag != "ReadTurn":
        return None
    payload = message.payload
    if not isinstance(payload, dict):
        return None
    if (payload.get("sessionId"), payload.get("turnId")) != (session_id, turn_id):
        return None
    if payload.get("offset") != 0 or payload.get("afterStep") != 0:
        return None
    return message


def _key(request_id: RequestId) -> Tuple[type, RequestId]:
    # Ids keep their JSON type: 1 and "1" are different requests.
    return (type(request_id), request_id)


class Connection:
    """One WebSocket connection: reads frames (in the connection's own thread) and answers.

    ``_streams`` (the in-flight ReadTurns, by request id) is guarded by ``_lock``; every send
    goes through ``_send_lock``.
    """

    def __init__(self, server: ServerView, ws: WsConnection, number: int) -> None:
        self.server = server
        self.number = number
        self._ws = ws
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()
        self._streams: Dict[Tuple[type, RequestId], ReadStream] = {}
        self._closed = False
        self._sending_since: Optional[float] = None  # monotonic start of the send under way
        # While set, this connection's own thread gathers what it sends into one batch frame
        # (see _answer_start); other threads send as usual.
        self._gather: Optional[List[str]] = None
        self._gatherer = 0  # the gathering thread's ident
        self._rest: Deque[Any] = deque()  # what is left of the frame being served
        self._peeked: Any = None  # a frame _answer_start took from the queue, to serve next
        # The stream whose first Chunk is in the batch being gathered, and the Acks for it that
        # came meanwhile (early: the host cannot have it yet), handled once the batch is out.
        self._held: Optional[Tuple[type, RequestId]] = None
        self._held_acks: List[Ack] = []
        # What try_send knows of the socket's send queue without asking the kernel: of the
        # bytes the WebSocket wrote (its ``written``: frames, pongs, closes), those that had
        # left the queue when the kernel was last asked (under the WebSocket's lock). The
        # queue holds at most the difference: it only drains between two questions. (A host's
        # Ack is not trusted for this: a host may ack what it did not read.) And the most the
        # queue may hold for a send to go at once, as of that question (_send_bound): the
        # kernel's room then, in bytes, less what was written since, is room still.
        self._drained = 0
        try:
            self._fd = ws.socket.fileno()
        except (AttributeError, OSError):  # pragma: no cover
            self._fd = -1
        self._sock = getattr(ws, "socket", None)
        self._bound = _send_bound(self._sock, 0)

    # ------------------------------------------------------------------ sending

    def send_blocked(self, after: float = 0.5) -> bool:
        """True when a send has been under way for ``after`` seconds or more (the peer does
        not read): a polite close would wait for it."""
        since = self._sending_since
        return since is not None and time.monotonic() - since >= after

    def send(self, text: str) -> bool:
        """Send one text frame; return False when the connection is closed. A send that the
        socket does not take within the server's ``send_timeout`` drops the connection."""
        gather = self._gather
        if gather is not None and self._gatherer == threading.get_ident():
            gather.append(text)  # goes out with the rest of the batch (_answer_start)
            return True
        with self._send_lock:
            return bool(self._send_locked(text))

    def try_send(self, text: str) -> Optional[bool]:
        """Send one text frame only if it goes at once: no other send under way, a frame of at
        most :data:`INLINE_BYTES` characters, and room for its bytes in the socket's buffer
        beside what is queued there (in the kernel's own count: see :func:`_send_bound`),
        and the WebSocket's write lock free at once (its own
        thread may hold it while a pong waits on the peer): so the calling thread, which may be
        a turn's or the store's committing thread, never waits on a peer. Returns ``None`` when
        it did not send (send it with :meth:`send` from a thread that may wait), else as
        :meth:`send`.

        The kernel is asked what is queued only when what it held at the last question plus
        the frames sent since could fill the bound: that question lets go of the GIL, and in
        a bridge of many paced streams each such release costs the committing thread a wait."""
        if len(text) > INLINE_BYTES or not self._send_lock.acquire(blocking=False):
            return None
        size = _frame_bytes(text)  # bytes, not characters: non-ASCII takes up to 4 each

        def fits(written: int) -> bool:
            # Asked under the WebSocket's write lock: what it wrote (pongs and closes too)
            # cannot grow meanwhile.
            unsent = written - self._drained + _UNREAD_SLACK
            if unsent + size <= self._bound:
                return True
            queued = _queued(self._fd)
            if queued is None:
                return False
            self._drained = written - queued
            self._bound = _send_bound(self._sock, queued)
            return queued + size <= self._bound

        try:
            # wait=False: the connection's own thread may hold the WebSocket's lock while a
            # pong waits on a peer that does not read; this thread must not wait for it.
            return self._send_locked(text, wait=False, fits=fits)
        finally:
            self._send_lock.release()

    def _send_locked(self, text: str, wait: bool = True, fits: Any = None) -> Optional[bool]:
        """Send under ``_send_lock``; ``None`` when ``wait``/``fits`` kept it (see
        :meth:`WsConnection.send`), False when the connection is closed."""
        self._sending_since = time.monotonic()
        try:
            return True if self._ws.send(text, wait=wait, fits=fits) else None
        except ConnectionClosed as exc:
            cause = exc.__cause__
            if isinstance(cause, (BlockingIOError, TimeoutError)):  # SO_SNDTIMEO ran out
                log.warning(
                    "connection %d: a send did not complete within %g s (the peer does not "
                    "read); connection dropped",
                    self.number,
                    self.server.send_timeout,
                )
            return False
        finally:
            self._sending_since = None

    def _exit_text(self, request_id: RequestId, value: Any) -> str:
        """The Exit frame of ``value`` (a Success or Failure); Die if it cannot be encoded."""
        try:
            text = encode(Exit(request_id, value))
            text.encode("utf-8")  # a lone surrogate would fail inside websockets and drop the connection
        except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
            log.error("connection %d: cannot encode the answer to %r: %s", self.number, request_id, exc)
            text = encode(Exit(request_id, die(f"the answer cannot be encoded: {exc}")))
        return text

    def send_exit(self, request_id: RequestId, value: Any) -> None:
        """Answer a request with ``value`` (a Success or Failure); Die if it cannot be encoded."""
        self.send(self._exit_text(request_id, value))

    def try_send_exit(self, request_id: RequestId, value: Any) -> Optional[bool]:
        """As :meth:`send_exit`, only if it goes at once (:meth:`try_send`): for a thread that
        must not wait on the peer. ``None`` when it did not go."""
        return self.try_send(self._exit_text(request_id, value))

    def send_fail(self, request_id: RequestId, error: Dict[str, Any]) -> None:
        """Answer with a typed error (``Fail``)."""
        self.send_exit(request_id, fail(error))

    def send_die(self, request_id: RequestId, message: str) -> None:
        """Answer with a defect (``Die``): a bad request or a bug, for this request alone."""
        self.send_exit(request_id, die(message))

    def send_defect(self, message: str) -> None:
        """Report a frame that no request can be blamed for; the connection stays."""
        self.send(encode(Defect(frame_text(message))))

    # ------------------------------------------------------------------ reading

    def serve(self) -> None:
        """Read and answer frames until the connection closes, then stop its streams."""
        try:
            while True:
                data, self._peeked = self._peeked, None
                if data is not None:  # taken from the queue by _answer_start: next in order
                    self._frame(data)
                    continue
                try:
                    data = self._ws.recv(timeout=self.server.silence_timeout)
                except TimeoutError:
                    log.warning(
                        "connection %d: no frame for %s s, closing it",
                        self.number,
                        self.server.silence_timeout,
                    )
                    self._ws.close(1001, "silent for too long")
                    break
                except ConnectionClosed:
                    break
                self._frame(data)
        finally:
            with self._lock:
                self._closed = True
                streams = list(self._streams.values())
            for stream in streams:
                stream.stop("closed")
            deadline = time.monotonic() + _STREAM_JOIN_TIMEOUT
            for stream in streams:
                stream.join(max(0.0, deadline - time.monotonic()))

    def _frame(self, data: Any) -> None:
        try:
            objects = parse_frame(data)
        except FrameError as exc:
            self.send_defect(str(exc))
            return
        self._rest = rest = deque(objects)
        while rest:
            obj = rest.popleft()
            try:
                message = host_message(obj)
            except FrameError as exc:
                if exc.request_id is not None:
                    self.send_die(exc.request_id, str(exc))
                else:
                    self.send_defect(str(exc))
                continue
            try:
                self._message(message)
            except Exception as exc:  # a bug here must not end the connection
                log.exception("connection %d: handling %r failed", self.number, message)
                if isinstance(message, Request):
                    self.send_die(message.id, f"{type(exc).__name__}: {exc}")
                else:
                    self.send_defect(f"{type(exc).__name__}: {exc}")

    def _message(self, message: Any) -> None:
        if isinstance(message, Request):
            self._request(message)
        elif isinstance(message, Ping):
            self.send(encode(Pong()))
        elif isinstance(message, Ack):
            key = _key(message.request_id)
            with self._lock:
                if key == self._held:  # before the batch with its Chunk is out (_answer_start)
                    self._held_acks.append(message)
                    return
                stream = self._streams.get(key)
            if stream is not None:
                stream.ack()
        elif isinstance(message, Interrupt):
            stream = self._stream(message.request_id)
            if stream is not None:
                stream.stop("interrupt")
        elif isinstance(message, Eof):
            pass  # Effect clients may send it; nothing to do

    def _stream(self, request_id: RequestId) -> Optional[ReadStream]:
        with self._lock:
            return self._streams.get(_key(request_id))

    def forget(self, stream: ReadStream) -> None:
        """Remove a finished stream from the in-flight requests (before its Exit goes out),
        and from the bridge's count of streams."""
        with self._lock:
            if self._streams.get(_key(stream.request_id)) is not stream:
                return
            del self._streams[_key(stream.request_id)]
        self.server.give_stream()

    # ------------------------------------------------------------------ requests

    def _request(self, request: Request) -> None:
        if self._stream(request.id) is not None:
            self.send_die(request.id, f"request id {request.id!r} is already in flight on this connection")
            return
        decoded = self.server.dispatcher.decode(request)
        if isinstance(decoded, Failure):  # an unknown RPC, a payload of the wrong shape
            self.send_exit(request.id, decoded)
            return
        rpc, args = decoded
        if rpc.stream:
            self._read_turn(request.id, **args)
            return
        value = self.server.dispatcher.call(rpc, args, self.number)
        if rpc.tag == "StartTurn" and isinstance(value, Success) and value.value["status"] == "started":
            self._answer_start(request.id, value, args)
            # Written once the answer is out: the line's write (a syscall, about 70 us on a
            # VM) is not on the path to the turn's first part.
            turn_log.info("turn %s started (session %s)", args["turn_id"], args["session_id"])
            return
        self.send_exit(request.id, value)

    def _answer_start(self, request_id: RequestId, value: Success, args: Dict[str, Any]) -> None:
        """Answer a StartTurn that started its turn; when the next message (behind it in its
        batch frame, or the next frame already received) is the ReadTurn of that turn from its
        start, serve it now and send the answer, that stream's first Chunk (and its Exit, if
        the turn is over) in one batch frame: the order on the wire is the order of serving,
        the host is woken once, and the bridge writes once. Anything else that came next is
        served after the answer, as the loop would."""
        session_id, turn_id = args["session_id"], args["turn_id"]
        rest = self._rest
        if rest:  # more of the StartTurn's own frame: the loop in _frame serves what is not taken
            read = _read_turn_message(rest[0], session_id, turn_id)
            if read is None:
                self.send_exit(request_id, value)
                return
            rest.popleft()
        else:
            try:
                data = self._ws.recv(timeout=0)
            except (TimeoutError, ConnectionClosed):
                self.send_exit(request_id, value)
                return
            except Exception:
                self.send_exit(request_id, value)
                raise
            read = _read_turn_of(data, session_id, turn_id)
            if read is None:
                self.send_exit(request_id, value)
                self._peeked = data  # served next by the loop, in order
                return
        gather: List[str] = []
        # An Ack of the new stream before the batch is out (the host sent it before it got
        # the first Chunk) waits for the batch: else its next Chunk could go out first.
        with self._lock:
            self._held = _key(read.id)
        try:
            self._gatherer, self._gather = threading.get_ident(), gather
            try:
                self.send_exit(request_id, value)
                try:
                    self._message(read)
                except Exception as exc:  # as _frame does
                    log.exception("connection %d: handling %r failed", self.number, read)
                    self.send_die(read.id, f"{type(exc).__name__}: {exc}")
            finally:
                self._gather = None
            self.send(gather[0] if len(gather) == 1 else "[" + ",".join(gather) + "]")
        finally:
            with self._lock:
                self._held, acks, self._held_acks = None, self._held_acks, []
        for ack in acks:
            self._message(ack)

    def _read_turn(
        self, request_id: RequestId, session_id: str, turn_id: str, offset: int, after_step: int
    ) -> None:
        try:
            turn = self.server.manager.find_turn(session_id, turn_id)
        except RpcError as exc:
            self.send_fail(request_id, exc.to_wire())
            return
        stream = ReadStream(self, request_id, turn, offset, after_step)
        with self._lock:
            if self._closed:
                return
            if len(self._streams) >= self.server.max_streams_per_connection:
                busy = f"{len(self._streams)} streams are open on this connection, the most it may have"
            elif not self.server.take_stream():
                busy = f"{self.server.max_streams} streams are open in this bridge, the most it serves"
            else:
                busy = ""
                self._streams[_key(request_id)] = stream
        if busy:
            self.send_fail(request_id, Overloaded(f"{busy}: try again later", turnId=turn_id).to_wire())
            return
        stream.start()

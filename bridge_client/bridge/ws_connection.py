"""One WebSocket connection of the bridge, read and answered by a single thread, on websockets'
Sans-I/O protocol (:class:`websockets.server.ServerProtocol`).

websockets' own sync server gives every connection two threads (a reader that parses frames
and a handler it hands each message to), a socket pair and an epoll selector; per session
that was about a third of the bridge's CPU when a host opens many at once. Here the thread
that serves the connection reads the socket itself: a message is parsed and answered where it
was read, with no hand-off. Any thread may send (a ReadTurn's, the store's): every write to
the protocol and the socket is under one lock, held while the bytes go into the socket (a
send bounded by the socket's ``SO_SNDTIMEO``). The connection's own thread holds it while a
pong or a close goes out, so a thread that must not wait on the peer sends with
``wait=False`` (see :meth:`WsConnection.send`). Bytes a client sent right behind its upgrade
request are read once the 101 is out; nothing read behind a message that failed the
connection (invalid UTF-8, 1007) is served.

Errors are websockets' own: :class:`~websockets.exceptions.ConnectionClosed` once the
connection is closed (its ``__cause__`` the socket's error when a send failed),
``TimeoutError`` when :meth:`WsConnection.recv` waited its time out.
"""
from __future__ import annotations

import errno
import socket
import struct
import threading
import time
from collections import deque
from typing import Any, Callable, Deque, List, Optional, Union

from websockets.exceptions import ConnectionClosed, ConnectionClosedError
from websockets.frames import Frame, Opcode
from websockets.http11 import Request, Response
from websockets.protocol import State
from websockets.server import ServerProtocol

__all__ = ["WsConnection"]

_READ_BYTES = 65536
_NO_WAIT = getattr(socket, "MSG_DONTWAIT", 0)

Message = Union[str, bytes]


class WsConnection:
    """A server-side WebSocket connection on an accepted socket (see the module docstring).

    Args:
        sock: the accepted, blocking socket.
        address: the peer's address, as ``accept`` gave it.
        max_size: the largest message, in bytes (a bigger one closes the connection, 1009).
        close_timeout: seconds the closing handshake may take before the socket is shut.

    Attributes:
        socket: the socket. request: the upgrade request, once read.
        remote_address: the peer's address.
        written: the bytes given to the socket so far (frames, pongs, closes; under the lock).
    """

    def __init__(self, sock: socket.socket, address: Any, max_size: int, close_timeout: float) -> None:
        self.socket = sock
        self.remote_address = address
        self.protocol = ServerProtocol(max_size=max_size)
        self.request: Optional[Request] = None
        self._close_timeout = close_timeout
        self._lock = threading.Lock()  # the protocol's state and every write to the socket
        self._messages: Deque[Message] = deque()  # read and not yet taken (one read, many frames)
        self._fragments: Optional[List[Frame]] = None  # a fragmented message being read
        self._failed = False  # a message failed the connection: frames read behind it are dropped
        self._wait_set = 0.0  # the socket's SO_RCVTIMEO now, in seconds (0: none)
        self._ended = threading.Event()  # the reading side saw the end (EOF or an error)
        self._error: Optional[BaseException] = None  # why a send or a read failed
        self.written = 0  # bytes given to the socket so far (pongs and closes too), under _lock
        self._reader = threading.current_thread()  # made in the thread that serves it
        self._shut = False  # abort() shut the socket both ways (or found it not connected)

    # ------------------------------------------------------------------ the upgrade

    def handshake(self, process_request: Callable[["WsConnection", Request], Optional[Response]],
                  timeout: float) -> bool:
        """Read the upgrade request (within ``timeout`` seconds), ask ``process_request`` for
        a response to send instead of the 101 (``None``: upgrade), and send it. Returns True
        when the connection is open."""
        deadline = time.monotonic() + timeout
        # Only the request goes to the protocol before the answer: what a client sent right
        # behind it (frames, a ping, a close) is fed once the 101 is out, as any later bytes;
        # fed before, its pong or close would be written ahead of the 101.
        tail = b""  # the last bytes fed, to find the head's end across reads
        behind = b""
        while self.request is None:
            try:
                data = self._read(deadline)
            except OSError:  # timed out (TimeoutError), or the socket failed
                return False
            if data:
                end = (tail + data).find(b"\r\n\r\n")
                if end >= 0:
                    cut = end + 4 - len(tail)
                    data, behind = data[:cut], data[cut:]
                tail = (tail + data)[-3:]
            with self._lock:
                if data:
                    self.protocol.receive_data(data)
                else:
                    self.protocol.receive_eof()
                for event in self.protocol.events_received():
                    if isinstance(event, Request):
                        self.request = event
                try:
                    self._flush_locked()  # a 4xx the protocol answered a bad request with
                except ConnectionClosed:
                    return False
            if self.request is None and (not data or behind or self.protocol.handshake_exc is not None):
                return False
        response = process_request(self, self.request)
        with self._lock:
            if response is None:
                response = self.protocol.accept(self.request)
                if response.status_code == 101 and "Date" in response.headers:
                    del response.headers["Date"]  # optional in a 1xx answer (RFC 9110 6.6.1)
            self.protocol.send_response(response)
            try:
                self._flush_locked()
            except ConnectionClosed:
                return False
        if self.protocol.state is not State.OPEN:
            return False
        if behind:
            self._feed(behind)
        return True

    def respond(self, status: int, text: str) -> Response:
        """A plain-text response to send instead of the upgrade (as websockets' ``respond``)."""
        return self.protocol.reject(status, text)

    # ------------------------------------------------------------------ reading

    def recv(self, timeout: Optional[float] = None) -> Message:
        """The next message (``str`` for text, ``bytes`` for binary). Only the connection's
        own thread reads.

        Raises:
            TimeoutError: none came within ``timeout`` seconds (0: only one already here).
            ConnectionClosed: the connection is closed.
        """
        if self._messages:
            return self._messages.popleft()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self.protocol.state is not State.OPEN or self._ended.is_set():
                raise self._closed()  # (what follows is read by close(), up to the peer's end)
            try:
                data = self._read(deadline)
            except OSError as exc:  # TimeoutError is an OSError
                if isinstance(exc, TimeoutError):
                    raise
                self._error = self._error or exc
                data = b""
            self._feed(data)
            if self._messages:
                return self._messages.popleft()

    def _read(self, deadline: Optional[float]) -> bytes:
        """Bytes from the socket (``b""`` at its end), waiting until ``deadline`` at most.

        One blocking ``recv`` bounded by the socket's ``SO_RCVTIMEO`` (set to what is left
        of the wait, when that changed), not a look without a wait, a ``poll`` and a second
        ``recv``: each of those gives up the GIL and takes it back, and with many connections
        each of those hand-overs is a thread switch or two. (Python's own socket timeout would
        ``poll`` first too.)"""
        while True:
            if deadline is None:
                wait = 0.0  # no bound
            else:
                left = deadline - time.monotonic()
                if left <= 0:  # only what is there already
                    try:
                        return self.socket.recv(_READ_BYTES, _NO_WAIT)
                    except BlockingIOError:
                        raise TimeoutError("no message in time") from None
                wait = max(left, 0.001)  # (0 would mean no bound)
            # Set again only when it changed by more than a millisecond: a connection waiting
            # for its next frame asks for the same silence timeout each time.
            if abs(wait - self._wait_set) > 0.001 or (wait == 0.0) != (self._wait_set == 0.0):
                whole = int(wait)
                self.socket.setsockopt(
                    socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", whole, int((wait - whole) * 1e6))
                )
                self._wait_set = wait
            try:
                return self.socket.recv(_READ_BYTES)
            except BlockingIOError:  # SO_RCVTIMEO ran out (EAGAIN): the deadline, or nearly
                if deadline is None:
                    continue

    def _feed(self, data: bytes) -> None:
        """Give read bytes (``b""``: the end) to the protocol; keep the messages they end."""
        with self._lock:
            if data:
                self.protocol.receive_data(data)
            else:
                self.protocol.receive_eof()
            events = self.protocol.events_received()
            try:
                self._flush_locked()  # pongs and the close reply the protocol wrote
            except ConnectionClosed:
                pass
        for event in events:
            if isinstance(event, Frame):
                self._frame(event)
        if not data:
            self._ended.set()

    def _frame(self, frame: Frame) -> None:
        if self._failed:
            return  # after a message that failed the connection (1007): nothing more is served
        if frame.opcode in (Opcode.TEXT, Opcode.BINARY):
            self._fragments = [frame]
        elif frame.opcode is Opcode.CONT and self._fragments is not None:
            self._fragments.append(frame)
        else:
            return  # ping, pong, close: the protocol answered them
        if not frame.fin:
            return
        frames, self._fragments = self._fragments, None
        data = frames[0].data if len(frames) == 1 else b"".join(f.data for f in frames)
        if frames[0].opcode is Opcode.BINARY:
            self._messages.append(bytes(data))
            return
        try:
            self._messages.append(bytes(data).decode("utf-8"))
        except UnicodeDecodeError:
            self._failed = True
            with self._lock:
                self.protocol.fail(1007, "invalid UTF-8")  # as websockets does
                try:
                    self._flush_locked()
                except ConnectionClosed:
                    pass

    # ------------------------------------------------------------------ sending

    def send(
        self, message: Message, *, wait: bool = True, fits: Optional[Callable[[int], bool]] = None
    ) -> bool:
        """Send one text (``str``) or binary message; any thread.

        Args:
            wait: False: send only if no other write is under way (the lock is free at once);
                a thread that must not wait on a peer (a turn's, the store's) passes False,
                since the connection's own thread may be blocked writing a pong under the lock.
            fits: asked under the lock with :attr:`written`, whether the message may go now.

        Returns:
            True when sent; False when it was not (``wait`` or ``fits`` said no; nothing written).

        Raises:
            ConnectionClosed: the connection is closed, or the socket did not take the bytes
                (then the connection is shut and the socket's error is the ``__cause__``).
        """
        if not self._lock.acquire(blocking=wait):
            return False
        try:
            if self.protocol.state is not State.OPEN:
                raise self._closed()
            if fits is not None and not fits(self.written):
                return False
            if isinstance(message, str):
                self.protocol.send_text(message.encode("utf-8"))
            else:
                self.protocol.send_binary(message)
            self._flush_locked()
            return True
        finally:
            self._lock.release()

    def _flush_locked(self) -> None:
        """Write what the protocol has to send (lock held); ``b""`` ends our side."""
        for data in self.protocol.data_to_send():
            try:
                if data:
                    self.socket.sendall(data)
                    self.written += len(data)
                else:
                    self.socket.shutdown(socket.SHUT_WR)
            except OSError as exc:
                self._error = self._error or exc
                self.abort()
                raise self._closed() from exc

    # ------------------------------------------------------------------ closing

    def close(self, code: int = 1000, reason: str = "") -> None:
        """Start the closing handshake and wait (at most the close timeout) for its end, then
        shut the socket. Any thread; idempotent."""
        with self._lock:
            if self.protocol.state is State.OPEN:
                self.protocol.send_close(code, reason)
                try:
                    self._flush_locked()
                except ConnectionClosed:
                    pass
        deadline = time.monotonic() + self._close_timeout
        if threading.current_thread() is self._reader:
            while not self._ended.is_set():  # read the peer's close (what else comes is dropped)
                try:
                    self._feed(self._read(deadline))
                except OSError:  # timed out, or the socket failed
                    break
        else:
            self._ended.wait(max(0.0, deadline - time.monotonic()))
        self.abort()

    def abort(self) -> None:
        """Shut the socket down both ways at once (a blocked send or read returns). Once that
        is done (or the peer's end made it moot), later calls make no system call."""
        if self._shut:
            return
        try:
            self.socket.shutdown(socket.SHUT_RDWR)
        except OSError as exc:
            if exc.errno != errno.ENOTCONN:
                return
        self._shut = True

    def close_socket(self) -> None:
        """The end of the connection's thread: shut and close the socket."""
        self.abort()
        self._ended.set()
        try:
            self.socket.close()
        except OSError:
            pass

    # ------------------------------------------------------------------ internals

    def _closed(self) -> ConnectionClosed:
        protocol = self.protocol
        if protocol.state is State.CLOSED:
            exc: ConnectionClosed = protocol.close_exc
        else:  # closing, or a socket that failed under an open protocol
            rcvd, sent = protocol.close_rcvd, protocol.close_sent
            order = protocol.close_rcvd_then_sent if rcvd is not None and sent is not None else None
            exc = ConnectionClosedError(rcvd, sent, order)
        if self._error is not None and exc.__cause__ is None:
            exc.__cause__ = self._error
        return exc

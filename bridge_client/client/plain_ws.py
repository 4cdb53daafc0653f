"""The WebSocket of a direct ``ws://`` connection (no TLS, no proxy: LocalSandbox, a Docker
port on loopback): websockets' Sans-I/O client protocol (``ClientProtocol``, the one the
bridge serves with) on the socket :func:`.transport.open_options` opened, this module doing
the socket's reads and writes.

It offers :class:`~.connection.Connection` what it uses of websocket-client's ``WebSocket``
(``send``, ``recv_data``, ``send_close``, ``abort``, ``shutdown``, ``settimeout``, ``sock``),
with the same behaviour and websocket-client's exception classes: a ping is answered with a
pong, a close with a close, a fragmented message is joined. Why not websocket-client on this
path: it reads the 101 a byte per call through three Python layers,
and reads and masks each frame through as many; here one read serves the upgrade's answer
and the frames behind it. TLS and proxies keep websocket-client, whose connect handles them.
"""
from __future__ import annotations

import re
import socket
import struct
import sys
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from websocket import (
    WebSocketBadStatusException,
    WebSocketConnectionClosedException,
    WebSocketException,
    WebSocketProtocolException,
    WebSocketTimeoutException,
)
from websockets.client import ClientProtocol
from websockets.datastructures import Headers
from websockets.exceptions import InvalidState, InvalidStatus, ProtocolError
from websockets.frames import Frame
from websockets.uri import parse_uri

__all__ = ["PlainWebSocket", "OP_TEXT", "OP_BINARY", "OP_CLOSE", "OP_PING", "OP_PONG"]

OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x1, 0x2, 0x8, 0x9, 0xA
_READ = 65536  # bytes asked of the kernel per read
_STATUS_LINE = re.compile(rb"HTTP/1\.[01] (\d{3}) ?([^\r\n]*)")
_KERNEL_TIMEOUTS = sys.platform.startswith("linux")  # SO_RCVTIMEO takes a struct timeval here


class PlainWebSocket:
    """One upgraded ``ws://`` connection on an open socket (see the module docstring).

    Args:
        sock: the connected TCP socket (its timeout applies to every read and write).

    Attributes:
        sock: the socket, ``None`` once shut down or lost.
        connected: True from the upgrade until a close is sent or the socket is lost.
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock: Optional[socket.socket] = sock
        self.connected = False
        # The protocol is not thread-safe: the callers' sends and the reader's feeding (which
        # may queue a pong or a close) take this lock, and write what it queued under it.
        self._lock = threading.Lock()
        self._protocol: Optional[ClientProtocol] = None
        self._events: List[Any] = []
        self._fragments: List[bytes] = []
        self._fragment_op = 0

    @classmethod
    def opened(cls, sock: socket.socket, url: str, headers: Sequence[str]) -> "PlainWebSocket":
        """A connection upgraded on ``sock`` (see :meth:`upgrade`); the socket is closed when
        the upgrade fails, as websocket-client's connect closes its own."""
        ws = cls(sock)
        try:
            ws.settimeout(sock.gettimeout())
            ws.upgrade(url, headers)
        except BaseException:
            ws.shutdown()
            raise
        return ws

    def upgrade(self, url: str, headers: Sequence[str]) -> None:
        """Send the upgrade request for ``url`` with ``headers`` (``"Name: value"`` lines, after
        websockets' own; no ``Origin``) and read its answer; bytes past the answer's head are
        the first frames'.

        Raises:
            WebSocketBadStatusException: the answer is not a 101 (``status_code``).
            WebSocketException: not an HTTP answer, or a 101 that does not complete the upgrade.
            OSError: the socket failed or timed out.
        """
        protocol = self._protocol = ClientProtocol(parse_uri(url), max_size=None)
        request = protocol.connect()
        for line in headers:
            name, _, value = line.partition(":")
            request.headers[name.strip()] = value.strip()
        protocol.send_request(request)
        with self._lock:
            self._flush()
        first = b""  # the answer's first bytes, for a status websockets does not parse
        while protocol.handshake_exc is None and not self._events:
            data = self._recv()
            first = first if len(first) >= 1024 else first + data
            self._feed(data)
        error = protocol.handshake_exc
        if isinstance(error, InvalidStatus):
            answer = error.response
            message = f"Handshake status {answer.status_code} {answer.reason_phrase}"
            raise WebSocketBadStatusException(message, answer.status_code, answer.reason_phrase,
                                              _lower(answer.headers))
        if error is not None:
            # websockets reads HTTP/1.1 answers only; an HTTP/1.0 server's "401" is still a
            # status (websocket-client took any HTTP/1.x status line, and a 401 must stay one).
            status = _STATUS_LINE.match(first)
            if status is not None:
                code, reason = int(status.group(1)), status.group(2).decode("latin-1")
                raise WebSocketBadStatusException(f"Handshake status {code} {reason}", code, reason)
            raise WebSocketException(f"the upgrade failed: {error}") from None
        self._events.pop(0)  # the 101
        self.connected = True

    # ------------------------------------------------------------------ websocket-client's API

    def settimeout(self, timeout: Optional[float]) -> None:
        """The socket's timeout for every read and write. On Linux it is the kernel's
        (``SO_RCVTIMEO``, ``SO_SNDTIMEO``, the socket itself blocking): a read or a write is
        then one system call, where Python's own timeout polls before each (two hand-overs
        of the GIL instead of one)."""
        sock = self._socket()
        if _KERNEL_TIMEOUTS and timeout is not None and timeout > 0:
            seconds = int(timeout)
            micros = int((timeout - seconds) * 1e6) or (0 if seconds else 1)  # zero would be "never"
            value = struct.pack("ll", seconds, micros)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)
            sock.settimeout(None)
        else:
            sock.settimeout(timeout)

    def send(self, payload: Union[bytes, str], opcode: int = OP_TEXT) -> int:
        """Send one whole frame (``str`` as UTF-8); returns the payload's length in bytes.

        Raises:
            WebSocketConnectionClosedException: the socket is gone, or the connection closing.
            WebSocketTimeoutException: the socket's timeout passed with the frame unsent.
        """
        data = payload.encode("utf-8") if isinstance(payload, str) else payload
        with self._lock:
            protocol = self._open_protocol()
            try:
                _SENDS[opcode](protocol, data)
            except (InvalidState, ProtocolError) as exc:  # a close was sent or received
                raise WebSocketConnectionClosedException(f"the connection is closing: {exc}") from None
            self._flush()
        return len(data)

    def recv_data(self) -> Tuple[int, bytes]:
        """The next message (``(opcode, payload)``; a fragmented one joined), or a close frame
        (answered with a close first). Pings are answered with a pong on the way.

        Raises:
            WebSocketTimeoutException: nothing came within the socket's timeout.
            WebSocketConnectionClosedException: the peer closed the socket.
            WebSocketProtocolException: a frame this client does not accept.
        """
        while True:
            while self._events:
                frame = self._events.pop(0)
                if not isinstance(frame, Frame):
                    continue
                message = self._message(frame)
                if message is not None:
                    return message
            if self._protocol is not None and self._protocol.parser_exc is not None:
                self._fail()  # what came before the bad frame was given out first
            self._feed(self._recv())

    def send_close(self, status: int = 1000, reason: bytes = b"") -> None:
        """Send a close frame; the connection counts as closing from now on."""
        self.connected = False
        with self._lock:
            protocol = self._open_protocol()
            try:
                protocol.send_close(status, reason.decode("utf-8", "replace"))
            except (InvalidState, ProtocolError):  # already closing: nothing more to say
                return
            self._flush()

    def abort(self) -> None:
        """Wake a thread blocked reading (a TCP shutdown), while the connection is open."""
        sock = self.sock
        if self.connected and sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except (OSError, AttributeError):
                pass

    def shutdown(self) -> None:
        """Close the socket at once."""
        sock, self.sock, self.connected = self.sock, None, False
        if sock is not None:
            try:
                sock.close()
            except (OSError, AttributeError):
                pass

    # ------------------------------------------------------------------ internals

    def _socket(self) -> socket.socket:
        sock = self.sock
        if sock is None:
            raise WebSocketConnectionClosedException("socket is already closed.")
        return sock

    def _open_protocol(self) -> ClientProtocol:
        if self._protocol is None:
            raise WebSocketConnectionClosedException("the connection is not upgraded")
        return self._protocol

    def _flush(self) -> None:
        """Write what the protocol queued (under ``_lock``): every byte, in order."""
        protocol = self._open_protocol()
        sock = self._socket()
        try:
            for data in protocol.data_to_send():
                # An empty chunk is websockets' "half-close now": the close frame says it.
                # send() in a loop, as websocket-client does: a wrapper of the socket sees
                # each call.
                view = memoryview(data)
                while view:
                    view = view[sock.send(view) :]
        except (socket.timeout, BlockingIOError) as exc:  # Python's timeout, the kernel's
            raise WebSocketTimeoutException(str(exc) or "timed out") from None

    def _recv(self) -> bytes:
        try:
            return self._socket().recv(_READ)
        except (socket.timeout, BlockingIOError) as exc:
            raise WebSocketTimeoutException(str(exc) or "timed out") from None

    def _feed(self, data: bytes) -> None:
        """Hand ``data`` (``b""``: the peer closed) to the protocol, write what it answers
        (a pong, a close), and keep its events."""
        with self._lock:
            protocol = self._open_protocol()
            if data:
                protocol.receive_data(data)
            else:
                protocol.receive_eof()
            events = protocol.events_received()
            try:
                self._flush()
            except (OSError, WebSocketException):
                pass  # the peer is gone or not reading: the read below says so
        self._events.extend(events)
        if protocol.parser_exc is not None and not events:
            self._fail()
        if not data and not events:
            self.shutdown()
            raise WebSocketConnectionClosedException("Connection to remote host was lost.")

    def _fail(self) -> None:
        error = self._protocol.parser_exc if self._protocol is not None else None
        self.shutdown()
        raise WebSocketProtocolException(str(error) or type(error).__name__)

    def _message(self, frame: Frame) -> Optional[Tuple[int, bytes]]:
        """A frame into what :meth:`recv_data` returns: a whole message, a close, or ``None``
        (a fragment of a message not yet whole, a ping or a pong: the protocol answered)."""
        opcode, data = int(frame.opcode), bytes(frame.data)  # bytes already, from the parser
        if opcode == OP_CLOSE:
            self.connected = False
            return opcode, data
        if opcode in (OP_PING, OP_PONG):
            return None
        if opcode != 0:  # text or binary: a message begins (the protocol checked the order)
            if frame.fin:
                return opcode, data
            self._fragment_op, self._fragments = opcode, [data]
            return None
        self._fragments.append(data)
        if not frame.fin:
            return None
        whole = (self._fragment_op, b"".join(self._fragments))
        self._fragments = []
        return whole


def _lower(headers: Headers) -> Dict[str, str]:
    """The answer's headers as websocket-client gives them (names in lower case)."""
    return {name.lower(): value for name, value in headers.raw_items()}


# What send() does per opcode: the protocol's own methods, which check its state.
_SENDS: Dict[int, Callable[[ClientProtocol, bytes], None]] = {
    OP_TEXT: ClientProtocol.send_text,
    OP_BINARY: ClientProtocol.send_binary,
    OP_PING: ClientProtocol.send_ping,
    OP_PONG: ClientProtocol.send_pong,
}

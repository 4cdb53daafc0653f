"""The WebSocket of a direct ``ws://`` connection (no TLS, no proxy: LocalSandbox, a Docker
port on loopback): the upgrade and the frames done here, on the socket
:func:`.transport.open_options` opened, with :mod:`bridge_client.wire.ws_frames`.

It offers :class:`~.connection.Connection` what it uses of websocket-client's
``WebSocket`` (``send``, ``recv_data``, ``send_close``, ``abort``, ``shutdown``,
``settimeout``, ``sock``), with the same behaviour and websocket-client's exception classes:
a ping is answered with a pong, a close with a close, a fragmented message is joined.
Why not websocket-client on this path (issue 15, sixth round): it reads the 101 a byte per
call through three Python layers, and reads and masks each frame through as many; a
connection's upgrade and frames here cost a fraction of that. TLS and proxies keep
websocket-client, whose connect handles them.
"""
from __future__ import annotations

import base64
import socket
import struct
import sys
import threading
from typing import Callable, List, Optional, Sequence, Tuple, Union
from urllib.parse import urlsplit

from websocket import (
    WebSocketBadStatusException,
    WebSocketConnectionClosedException,
    WebSocketException,
    WebSocketProtocolException,
    WebSocketTimeoutException,
)

from ..wire import ws_frames
from ..wire.ws_frames import OP_BINARY, OP_CLOSE, OP_CONT, OP_PING, OP_PONG, OP_TEXT

__all__ = ["PlainWebSocket"]

_READ = 65536  # bytes asked of the kernel per read
_KERNEL_TIMEOUTS = sys.platform.startswith("linux")  # SO_RCVTIMEO takes a struct timeval here


class PlainWebSocket:
    """One upgraded ``ws://`` connection on an open socket (see the module docstring).

    Args:
        sock: the connected TCP socket (its timeout applies to every read and write).
        get_mask_key: ``length -> bytes``, the mask keys of the frames sent (websocket-client's
            ``get_mask_key``; :class:`.transport.MaskKeys`).

    Attributes:
        sock: the socket, ``None`` once shut down or lost.
        connected: True from the upgrade until a close is sent or the socket is lost.
    """

    def __init__(self, sock: socket.socket, get_mask_key: Callable[[int], bytes]) -> None:
        self.sock: Optional[socket.socket] = sock
        self.connected = False
        self._mask_key = get_mask_key
        self._lock = threading.Lock()  # one frame at a time on the wire (callers and reader)
        self._frames = ws_frames.FrameReader()
        self._fragments: List[bytes] = []
        self._fragment_op: Optional[int] = None

    @classmethod
    def opened(
        cls, sock: socket.socket, get_mask_key: Callable[[int], bytes], url: str, headers: Sequence[str]
    ) -> "PlainWebSocket":
        """A connection upgraded on ``sock`` (see :meth:`upgrade`); the socket is closed when
        the upgrade fails, as websocket-client's connect closes its own."""
        ws = cls(sock, get_mask_key)
        try:
            ws.settimeout(sock.gettimeout())
            ws.upgrade(url, headers)
        except BaseException:
            ws.shutdown()
            raise
        return ws

    def upgrade(self, url: str, headers: Sequence[str]) -> None:
        """Send the upgrade request for ``url`` with ``headers`` and read its answer; bytes
        past the answer's head are the first frames'.

        Raises:
            WebSocketBadStatusException: the answer is not a 101 (``status_code``).
            WebSocketException: not an HTTP answer, or a 101 that does not complete the upgrade.
            OSError: the socket failed or timed out.
        """
        parts = urlsplit(url)
        resource = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        key = base64.b64encode(self._mask_key(16)).decode("ascii")  # a nonce: the mask keys' random draw
        sock = self._socket()
        request = ws_frames.upgrade_request(resource, parts.hostname or "", parts.port or 80, key, headers)
        self._send_all(sock, memoryview(request))
        data = b""
        while True:
            chunk = self._recv(sock)
            if not chunk:
                raise WebSocketConnectionClosedException("the peer closed the connection during the upgrade")
            data += chunk
            try:
                answer = ws_frames.read_upgrade_answer(data)
            except ws_frames.FrameError as exc:
                raise WebSocketException(str(exc)) from None
            if answer is not None:
                break
        status, reason, answer_headers, head_length = answer
        if status != 101:
            message = f"Handshake status {status} {reason}"
            raise WebSocketBadStatusException(message, status, reason, answer_headers)
        if not ws_frames.accept_matches(answer_headers, key):
            raise WebSocketException("Invalid WebSocket Header")
        if len(data) > head_length:
            self._frames.feed(data[head_length:])
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
        """Send one whole frame (``str`` as UTF-8); returns its length on the wire.

        Raises:
            WebSocketConnectionClosedException: the socket is gone.
            WebSocketTimeoutException: the socket's timeout passed with the frame unsent.
        """
        data = payload.encode("utf-8") if isinstance(payload, str) else payload
        frame = ws_frames.client_frame(opcode, data, self._mask_key(4))
        with self._lock:
            self._send_all(self._socket(), memoryview(frame))
        return len(frame)

    def recv_data(self) -> Tuple[int, bytes]:
        """The next message (``(opcode, payload)``; a fragmented one joined), or a close frame
        (answered with a close first). Pings are answered with a pong on the way.

        Raises:
            WebSocketTimeoutException: nothing came within the socket's timeout.
            WebSocketConnectionClosedException: the peer closed the socket.
            WebSocketProtocolException: a frame this client does not accept.
        """
        while True:
            try:
                frame = self._frames.next()
            except ws_frames.FrameError as exc:
                raise WebSocketProtocolException(str(exc)) from None
            if frame is None:
                self._fill()
                continue
            fin, opcode, payload = frame
            if opcode in (OP_TEXT, OP_BINARY, OP_CONT):
                message = self._message(fin, opcode, payload)
                if message is not None:
                    return message
            elif opcode == OP_CLOSE:
                if len(payload) == 1:
                    raise WebSocketProtocolException("a close frame with a 1-byte payload")
                self.send_close()
                return opcode, payload
            elif opcode == OP_PING:
                self.send(payload, OP_PONG)
            # OP_PONG: nothing to do

    def send_close(self, status: int = 1000, reason: bytes = b"") -> None:
        """Send a close frame; the connection counts as closing from now on."""
        self.connected = False
        self.send(struct.pack("!H", status) + reason, OP_CLOSE)

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

    @staticmethod
    def _send_all(sock: socket.socket, view: memoryview) -> None:
        """Every byte of ``view`` (``send`` in a loop, as websocket-client does: a wrapper of
        the socket sees each call); a timeout is websocket-client's exception."""
        try:
            while view:
                view = view[sock.send(view) :]
        except (socket.timeout, BlockingIOError) as exc:  # Python's timeout, the kernel's
            raise WebSocketTimeoutException(str(exc) or "timed out") from None

    @staticmethod
    def _recv(sock: socket.socket) -> bytes:
        try:
            return sock.recv(_READ)
        except (socket.timeout, BlockingIOError) as exc:
            raise WebSocketTimeoutException(str(exc) or "timed out") from None

    def _fill(self) -> None:
        data = self._recv(self._socket())
        if not data:
            self.shutdown()
            raise WebSocketConnectionClosedException("Connection to remote host was lost.")
        self._frames.feed(data)

    def _message(self, fin: bool, opcode: int, payload: bytes) -> Optional[Tuple[int, bytes]]:
        """A data frame into its message: the message when it is whole, else ``None``."""
        if opcode == OP_CONT:
            if self._fragment_op is None:
                raise WebSocketProtocolException("a continuation frame with no message begun")
        elif self._fragment_op is not None:
            raise WebSocketProtocolException("a new message before the last one's end")
        if fin:
            if self._fragment_op is None:
                return opcode, payload
            self._fragments.append(payload)
            whole = (self._fragment_op, b"".join(self._fragments))
            self._fragments, self._fragment_op = [], None
            return whole
        if self._fragment_op is None:
            self._fragment_op = opcode
        self._fragments.append(payload)
        return None

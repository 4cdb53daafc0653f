"""The bridge's listening socket and the bounds on its TCP connections: an ``accept``
that rides out a shortage of files or memory and refuses connections beyond the limits with
HTTP 503, the gate that counts connections and unfinished handshakes, and the send timeout
every accepted socket gets.

Plain sockets only: no WebSocket, no RPC; :mod:`bridge_client.bridge.server` serves what this
accepts.
"""
from __future__ import annotations

import collections
import errno
import logging
import select
import socket
import struct
import threading
import time
from typing import Any, List, Set, Tuple

from .limits import SEND_TIMEOUT

__all__ = [
    "ACCEPT_BACKOFF",
    "ConnectionGate",
    "ListeningSocket",
    "RateLimitedWarning",
    "abort",
    "listening_socket",
    "refuse",
    "set_send_timeout",
]

log = logging.getLogger("bridge_client.bridge.server")  # one logger for all the server's modules

ACCEPT_BACKOFF = 0.1  # seconds of pause after accept() failed for want of a file or memory
_ACCEPT_POLL_MS = 200  # how often a waiting accept looks whether the server was shut down
_RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_REFUSAL = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
_WARN_EVERY = 5.0  # seconds between two warnings about refused connections or accept errors


def set_send_timeout(sock: socket.socket, seconds: float) -> None:
    """Bound every send on ``sock`` (``SO_SNDTIMEO``): a blocked ``send`` fails after
    ``seconds``, and websockets then drops the connection instead of holding its lock."""
    whole = int(seconds)
    try:
        sock.setsockopt(
            socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", whole, int((seconds - whole) * 1e6))
        )
    except (OSError, struct.error):  # pragma: no cover - not on this platform: shutdown still aborts
        pass


def abort(sock: Any) -> None:
    """Shut ``sock`` down both ways without any lock: a send blocked in it returns at once."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except (OSError, AttributeError):
        pass


class RateLimitedWarning:
    """A warning logged at most once per ``_WARN_EVERY`` seconds, with how many were held back."""

    def __init__(self, message: str) -> None:
        self._message = message
        self._lock = threading.Lock()
        self._last = float("-inf")
        self._held = 0

    def __call__(self, detail: str) -> None:
        with self._lock:
            now = time.monotonic()
            if now - self._last < _WARN_EVERY:
                self._held += 1
                return
            held, self._held, self._last = self._held, 0, now
        log.warning("%s: %s%s", self._message, detail, f" ({held} more like it)" if held else "")


class ConnectionGate:
    """Bounds the bridge's TCP connections: at most ``max_connections`` at once (each
    costs two threads and a few files), of which at most ``max_handshakes`` still in their
    opening handshake. A connection beyond ``max_handshakes`` drops the oldest unfinished
    handshake (shut down, so its thread ends at once); one beyond ``max_connections`` when
    every slot has finished its handshake is refused with HTTP 503.

    Thread-safe; sockets are tracked from :meth:`admit` (accept) to :meth:`release` (the end
    of the connection's thread).
    """

    def __init__(self, max_connections: int, max_handshakes: int) -> None:
        self.max_connections = max_connections
        self.max_handshakes = max(1, min(max_handshakes, max_connections))
        self._lock = threading.Lock()
        self._pending: "collections.OrderedDict[socket.socket, None]" = collections.OrderedDict()
        self._counted: Set[socket.socket] = set()  # admitted and not dropped, guarded by _lock
        self._closed = False  # drop_pending() ran: nothing is admitted any more
        self._warn = RateLimitedWarning("connections refused or dropped (connection limits)")

    def admit(self, sock: socket.socket) -> bool:
        """A connection was accepted: take a slot (True), or refuse it (False)."""
        dropped: List[socket.socket] = []
        with self._lock:
            while self._pending and (
                len(self._pending) >= self.max_handshakes or len(self._counted) >= self.max_connections
            ):
                oldest, _ = self._pending.popitem(last=False)
                self._counted.discard(oldest)
                dropped.append(oldest)
            admitted = not self._closed and len(self._counted) < self.max_connections
            if admitted:
                self._counted.add(sock)
                self._pending[sock] = None
        for old in dropped:
            try:
                old.shutdown(socket.SHUT_RDWR)  # its handshake ends at once; its thread closes it
            except OSError:
                pass
        if dropped:
            self._warn(f"dropped {len(dropped)} unfinished handshake(s) for a new connection")
        if not admitted and not self._closed:
            self._warn(f"refused a connection: {self.max_connections} open already")
        return admitted

    def handshake_done(self, sock: Any) -> None:
        """The connection's HTTP request arrived whole."""
        with self._lock:
            self._pending.pop(sock, None)

    def release(self, sock: socket.socket) -> None:
        """The connection's thread ended (its socket is closed)."""
        with self._lock:
            self._pending.pop(sock, None)
            self._counted.discard(sock)

    def drop_pending(self) -> None:
        """Shut down every connection still in its handshake (the server is stopping: none of
        them would be served, and websockets' shutdown would wait for each to time out).
        From then on nothing is admitted (an ``accept()`` under way when the listening socket
        closed is refused)."""
        with self._lock:
            self._closed = True
            pending = list(self._pending)
        for sock in pending:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def counts(self) -> Tuple[int, int]:
        """``(connections, of them in their handshake)`` now."""
        with self._lock:
            return len(self._counted), len(self._pending)


def refuse(sock: socket.socket) -> None:
    """Answer 503 if the peer's buffer takes it at once, and close."""
    try:
        sock.setblocking(False)
        sock.send(_REFUSAL)
    except OSError:
        pass
    finally:
        sock.close()


class ListeningSocket(socket.socket):
    """The bridge's listening socket. websockets' ``serve_forever`` stops for good on any
    ``OSError`` from ``accept()``; this ``accept`` rides out a shortage of files or memory
    (EMFILE, ENFILE, ENOBUFS, ENOMEM: a pause, then again), refuses connections beyond the
    :class:`ConnectionGate`'s limits without starting a thread for them, and raises only
    once the socket is closed (the server's shutdown).

    The socket is non-blocking; ``accept`` waits with ``poll`` (no file of its own, no
    ``FD_SETSIZE`` limit), looking every ``_ACCEPT_POLL_MS`` whether it was closed.
    """

    gate: ConnectionGate
    _accept_warning: RateLimitedWarning
    send_timeout: float
    kind: Tuple[int, int, int]  # (family, type, proto) of accepted sockets, looked up once

    def accept(self) -> Tuple[socket.socket, Any]:
        """Wait for a connection the gate admits.

        Returns:
            ``(socket, address)``; the socket is blocking.

        Raises:
            OSError: the listening socket is closed (or another error than a shortage).
        """
        poller: Any = None
        while True:
            fd = self.fileno()
            if fd < 0:
                raise OSError(errno.EBADF, "the listening socket is closed")
            try:
                # First without a wait: in a burst of connections the next one is there.
                conn_fd, address = self._accept()  # type: ignore[attr-defined]
            except (BlockingIOError, InterruptedError):
                if poller is None:
                    poller = select.poll()
                poller.register(fd, select.POLLIN)
                try:
                    poller.poll(_ACCEPT_POLL_MS)
                finally:
                    try:
                        poller.unregister(fd)
                    except (KeyError, ValueError, OSError):
                        pass
                continue
            except OSError as exc:
                if exc.errno not in _RESOURCE_ERRNOS:
                    raise
                self._accept_warning(f"{exc.strerror or exc}; pausing {ACCEPT_BACKOFF} s")
                time.sleep(ACCEPT_BACKOFF)
                continue
            sock = socket.socket(self.kind[0], self.kind[1], self.kind[2], fileno=conn_fd)
            if sock.gettimeout() is not None:  # a default timeout was set: blocking is wanted
                sock.setblocking(True)  # (accept4 made the socket blocking: no system call)
            set_send_timeout(sock, self.send_timeout)
            if self.gate.admit(sock):
                return sock, address
            refuse(sock)


def listening_socket(
    bind: str, gate: ConnectionGate, send_timeout: float = SEND_TIMEOUT
) -> ListeningSocket:
    """Bind ``bind`` on a port the system picks, and listen.

    Raises:
        OSError: the address cannot be bound.
    """
    plain = socket.create_server((bind, 0), backlog=128)
    listening = ListeningSocket(fileno=plain.detach())
    listening.setblocking(False)
    listening.gate = gate
    listening.send_timeout = send_timeout
    listening.kind = (int(listening.family), int(listening.type), listening.proto)
    listening._accept_warning = RateLimitedWarning("accept() failed")
    return listening

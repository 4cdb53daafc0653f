"""The TCP socket of a direct ``ws://`` connection, opened so that the WebSocket upgrade's
response head is read in one go.

websocket-client reads the upgrade's response one byte per ``recv`` (about 200 system calls
and 200 Python-level reads per connection, half of the host's CPU for a connect on a running
bridge). :func:`direct_socket` opens the TCP connection itself, with websocket-client's own
socket options, and hands websocket-client (``create_connection(socket=...)``) a socket whose
``recv`` serves the response head from one peeked read until the blank line that ends it;
then the socket's own ``recv`` takes over. Nothing past the head is ever taken from the
socket, so the first WebSocket frame stays where websocket-client expects it. websocket-client
still writes the request and checks the response (status, ``Sec-WebSocket-Accept``).

``wss://`` URLs and connections through a proxy are left to websocket-client entirely.
"""
from __future__ import annotations

import socket
from typing import Any, Dict, Optional
from urllib.parse import urlsplit

import websocket
from websocket import DEFAULT_SOCKET_OPTION

from . import transport

__all__ = ["create_connection", "direct_socket", "HEAD_LIMIT"]

HEAD_LIMIT = 64 * 1024
"""Bytes of response head read ahead at most; a longer head is read on as websocket-client
reads it (a byte at a time)."""

_END = b"\r\n\r\n"


class _HeadSocket(socket.socket):
    """A TCP socket whose ``recv``, while the instance attribute set by :meth:`read_head_ahead`
    is there, serves the response head; it removes itself once the head is served."""

    # No __slots__: the instance __dict__ holds the ``recv`` that shadows the method (a
    # method of _socket.socket is not a data descriptor), so after the head every ``recv``
    # is the C method again, with no Python frame in between.

    def read_head_ahead(self) -> None:
        self._head = b""
        self._head_read = False
        self.recv = self._recv_head  # type: ignore[method-assign]

    def _recv_head(self, bufsize: int, flags: int = 0) -> bytes:
        if flags:
            return socket.socket.recv(self, bufsize, flags)
        if not self._head_read:
            self._head = self._take_head()
            self._head_read = True
        out, self._head = self._head[:bufsize], self._head[bufsize:]
        if not self._head:
            self.__dict__.pop("recv", None)  # the head is served: the socket's own recv again
        return out

    def _take_head(self) -> bytes:
        """The bytes up to and including the blank line after the headers (or what came
        before the peer closed, or the first :data:`HEAD_LIMIT` bytes), and nothing more."""
        taken = b""
        while len(taken) < HEAD_LIMIT:
            peeked = socket.socket.recv(self, HEAD_LIMIT - len(taken), socket.MSG_PEEK)
            if not peeked:
                return taken
            # The end may straddle what was taken and what is peeked now.
            seen = taken[-3:] + peeked
            end = seen.find(_END)
            if end >= 0:
                want = end + len(_END) - min(len(taken), 3)
                return taken + self._take_exactly(want)
            taken += self._take_exactly(len(peeked))
        return taken

    def _take_exactly(self, n: int) -> bytes:
        parts = []
        while n > 0:  # the bytes were peeked: each recv returns at once
            data = socket.socket.recv(self, n)
            if not data:
                break
            parts.append(data)
            n -= len(data)
        return b"".join(parts)


def direct_socket(url: str, timeout: Optional[float]) -> Optional[socket.socket]:
    """Open the TCP connection for ``url`` when it is a plain ``ws://`` URL that goes direct
    (no proxy from the environment, see :mod:`.transport`), ready for websocket-client's
    upgrade (``create_connection(url, socket=...)``).

    Args:
        url: the endpoint's URL.
        timeout: seconds for the TCP connect; the socket keeps it for the upgrade.

    Returns:
        The connected socket, or ``None`` for a ``wss://`` URL or one that goes through a
        proxy (websocket-client opens those itself).

    Raises:
        OSError: nothing accepts the connection, or the host name does not resolve.
    """
    parts = urlsplit(url)
    if parts.scheme != "ws" or not parts.hostname or transport.proxy_for(url) is not None:
        return None
    port = parts.port or 80
    error: Optional[OSError] = None
    for family, kind, proto, _, address in socket.getaddrinfo(parts.hostname, port, 0, socket.SOCK_STREAM):
        sock = _HeadSocket(family, kind, proto)
        try:
            sock.settimeout(timeout)
            for option in DEFAULT_SOCKET_OPTION:
                _set(sock, option)
            sock.connect(address)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        except BaseException:
            sock.close()
            raise
        sock.read_head_ahead()
        return sock
    raise error if error is not None else OSError(f"no address for {parts.hostname}")


def _set(sock: socket.socket, option: Any) -> None:
    sock.setsockopt(*option)


def create_connection(url: str, how: Dict[str, Any], **options: Any) -> websocket.WebSocket:
    """``websocket.create_connection(url, **how, **options)``, over :func:`direct_socket`'s
    socket when the URL goes direct over ``ws://``.

    Args:
        url: the endpoint's URL.
        how: :func:`.transport.connect_options` for it (TLS and proxies).
        options: websocket-client's other options; ``timeout`` also bounds the TCP connect.

    Raises:
        OSError, websocket.WebSocketException, ssl.SSLError: as websocket-client raises them
        (the socket is closed).
    """
    sock = direct_socket(url, options.get("timeout"))
    if sock is None:
        return websocket.create_connection(url, **how, **options)
    try:
        return websocket.create_connection(url, socket=sock, **how, **options)
    except BaseException:
        sock.close()  # websocket-client closes it too on most failures; twice is harmless
        raise

"""A TCP tunnel into a container through the Docker API, like ``kubectl port-forward``.

A listener on the host's loopback accepts connections; each accepted connection gets its own
forwarder, a small Python program exec'd inside the container that connects to the port there
and copies bytes between that socket and its stdin/stdout. The exec's stdin and stdout travel
over the exec's hijacked API connection, so this works for a container with no network at all
(``--network none``).

Framing (Docker Engine API, "Attach to a container" / exec start): with ``Tty: false`` the
output stream is multiplexed: each frame is an 8-byte header ``[stream, 0, 0, 0, size
(4 bytes, big-endian)]`` followed by ``size`` bytes; stream 1 is stdout, 2 is stderr. The input
direction is raw bytes; closing the write side of the connection closes the exec's stdin.
"""
from __future__ import annotations

import logging
import socket
import struct
from typing import Any, Callable, List, Optional, Union

from .loopback_relay import LoopbackRelay, close_quietly

__all__ = ["FORWARDER", "ExecStream", "Tunnel", "read_frames"]

log = logging.getLogger("bridge_client")

_HEADER = struct.Struct(">BxxxI")

FORWARDER = (
    "import os, socket, sys, threading\n"
    "s = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n"
    "s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)\n"
    "def up():\n"
    "    try:\n"
    "        while True:\n"
    "            b = os.read(0, 65536)\n"
    "            if not b:\n"
    "                break\n"
    "            s.sendall(b)\n"
    "        s.shutdown(socket.SHUT_WR)\n"
    "    except OSError:\n"
    "        os._exit(0)\n"
    "threading.Thread(target=up, daemon=True).start()\n"
    "out = sys.stdout.buffer\n"
    "try:\n"
    "    while True:\n"
    "        b = s.recv(65536)\n"
    "        if not b:\n"
    "            break\n"
    "        out.write(b)\n"
    "        out.flush()\n"
    "except OSError:\n"
    "    pass\n"
    "os._exit(0)\n"
)
"""The forwarder run inside the container as ``python -c FORWARDER PORT``."""


class ExecStream:
    """An exec's hijacked connection: the socket, plus the bytes the HTTP client had already
    read past the upgrade response into its buffer (served first by :meth:`recv`; otherwise
    they would be lost, as in docker-py issue 3332).

    Args:
        sock: the connected socket under the hijacked response.
        prefix: bytes of the stream that were read before the socket was handed over.
    """

    def __init__(self, sock: socket.socket, prefix: bytes = b"") -> None:
        self.sock = sock
        self._prefix = prefix

    def recv(self, n: int) -> bytes:
        """Up to ``n`` bytes of the stream (``b""`` at its end). Raises ``OSError``."""
        if self._prefix:
            chunk, self._prefix = self._prefix[:n], self._prefix[n:]
            return chunk
        return self.sock.recv(n)

    def sendall(self, data: bytes) -> None:
        """Send ``data`` to the exec's stdin. Raises ``OSError``."""
        self.sock.sendall(data)

    def shutdown(self, how: int) -> None:
        """``shutdown(SHUT_WR)`` closes the exec's stdin. Raises ``OSError``."""
        self.sock.shutdown(how)

    def settimeout(self, seconds: Optional[float]) -> None:
        """Bound each later ``recv`` (``None``: wait for ever)."""
        self.sock.settimeout(seconds)

    def close(self) -> None:
        """Close the connection (the engine then closes the exec's stdin and output)."""
        self.sock.close()


Stream = Union[socket.socket, ExecStream]


def _recv_exactly(sock: Stream, n: int) -> Optional[bytes]:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def read_frames(
    sock: Stream, on_stdout: Callable[[bytes], None], on_stderr: Callable[[bytes], None]
) -> None:
    """Read a multiplexed exec stream until it ends, handing each frame's bytes to
    ``on_stdout`` (stream 1) or ``on_stderr`` (stream 2; stream 0, stdin, counts as stdout).

    Raises:
        OSError: the socket failed (including ``socket.timeout`` when one is set).
    """
    while True:
        header = _recv_exactly(sock, _HEADER.size)
        if header is None:
            return
        stream, size = _HEADER.unpack(header)
        payload = _recv_exactly(sock, size) if size else b""
        if payload is None:
            return
        (on_stderr if stream == 2 else on_stdout)(payload)


class Tunnel(LoopbackRelay):
    """A loopback listener whose connections are bridged into a container.

    Args:
        open_stream: ``() -> ExecStream``: starts one forwarder in the container and returns
            the exec's hijacked connection.
        name: for log messages (``"container abc123 port 8000"``).

    Attributes:
        port: the host port (on 127.0.0.1) the tunnel listens on.

    Threads: one accepting, and two per open connection; all are daemons and end when
    :meth:`close` is called, when either side closes, or when the container goes away.
    """

    def __init__(self, open_stream: Callable[[], ExecStream], name: str) -> None:
        self._open_stream = open_stream
        super().__init__(name, "tunnel")

    def _open_far(self) -> ExecStream:
        return self._open_stream()

    def _copy_down(self, far: ExecStream, client: socket.socket) -> None:
        errors: List[bytes] = []
        try:
            read_frames(far, client.sendall, errors.append)
        finally:
            if errors:
                log.debug(
                    "tunnel %s: forwarder said: %s",
                    self._name,
                    b"".join(errors)[-500:].decode("utf-8", "replace"),
                )

    def _end_up(self, far: ExecStream) -> None:
        far.shutdown(socket.SHUT_WR)  # the forwarder's stdin ends: it half-closes too

    def _cut(self, item: Any) -> None:
        try:
            item.shutdown(socket.SHUT_RDWR)  # an ExecStream too: its socket under the HTTP response
        except OSError:
            pass
        close_quietly(item)

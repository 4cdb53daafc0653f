"""The bridge's connection reads (``bridge/ws_connection.py``): a frame that comes later is
read in one blocking ``recv`` (bounded by the socket's ``SO_RCVTIMEO``), not a ``recv``
without a wait, a ``poll`` and a second ``recv`` (each gives up the GIL and takes it back: a
thread switch or two with many connections); the wait's bound still holds, and a socket shut
from another thread ends a read at once.

A :class:`WsConnection` in this process over a real socket pair; the peer's frames are made
by hand (``raw_ws``).
"""
from __future__ import annotations

import socket
import threading
import time
from typing import Any, Iterator, List, Tuple

import pytest
from websockets.exceptions import ConnectionClosed

from bridge_client.bridge.ws_connection import WsConnection

from raw_ws import frame, request_bytes

pytestmark = pytest.mark.timeout(30)


class _Counting:
    """The server's socket, with each ``recv`` call recorded (its flags)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.recvs: List[Tuple[Any, ...]] = []

    def recv(self, *args: Any) -> bytes:
        self.recvs.append(args)
        return self._sock.recv(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


@pytest.fixture
def opened() -> Iterator[Tuple[WsConnection, _Counting, socket.socket]]:
    server, peer = socket.socketpair()
    counting = _Counting(server)
    ws = WsConnection(counting, ("peer", 1), 1 << 20, 1.0)  # type: ignore[arg-type]
    peer.sendall(request_bytes(1))
    assert ws.handshake(lambda connection, request: None, 5)
    head = b""
    while b"\r\n\r\n" not in head:
        head += peer.recv(4096)
    assert head.startswith(b"HTTP/1.1 101")
    try:
        yield ws, counting, peer
    finally:
        ws.close_socket()
        peer.close()


def test_a_frame_that_comes_later_is_read_in_one_recv(opened):
    ws, counting, peer = opened
    counting.recvs.clear()
    timer = threading.Timer(0.2, lambda: peer.sendall(frame(1, b"later")))
    timer.start()
    try:
        assert ws.recv(timeout=5) == "later"
    finally:
        timer.cancel()
    assert len(counting.recvs) == 1, counting.recvs


def test_the_wait_is_still_bounded(opened):
    ws, _, _ = opened
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        ws.recv(timeout=0.3)
    assert 0.25 <= time.monotonic() - started < 3
    with pytest.raises(TimeoutError):
        ws.recv(timeout=0)  # only what is there
    assert ws.send("still open")


def test_a_read_ends_when_another_thread_shuts_the_socket(opened):
    ws, _, _ = opened
    threading.Timer(0.2, ws.abort).start()
    started = time.monotonic()
    with pytest.raises(ConnectionClosed):
        ws.recv(timeout=20)
    assert time.monotonic() - started < 5

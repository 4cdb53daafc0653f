"""A direct connection's socket reads what the kernel has and serves websocket-client's small
reads from it (C04): the upgrade's head to its one-byte reads without a
system call each, a head that comes in pieces whole, and every byte in order, once: the frame
that follows the head in the same segment is the reader's."""
from __future__ import annotations

import base64
import hashlib
import socket
import threading
import time

import pytest
from upgrade_peer import read_upgrade_request

from bridge_client.client import transport
from bridge_client.client.connection import Connection
from bridge_client.errors import ConnectionLost
from bridge_client.redacted import Redacted
from bridge_client.sandbox.base import Endpoint

_HEAD = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
_CLOSE_FRAME = b"\x88\x02\x03\xe8"  # an unmasked close frame, code 1000


def _serve_once(listener: socket.socket, answer, hold: threading.Event) -> threading.Thread:
    """Accept one connection, read the upgrade request, call ``answer(sock, request)``, then
    keep the socket open until ``hold`` is set."""

    def serve() -> None:
        sock, _ = listener.accept()
        with sock:
            answer(sock, read_upgrade_request(sock))
            hold.wait(10)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def _accept_for(request: bytes) -> bytes:
    key = [line.split(b":", 1)[1].strip() for line in request.split(b"\r\n")
           if line.lower().startswith(b"sec-websocket-key:")][0]
    return base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())


@pytest.fixture
def listener():
    sock = socket.create_server(("127.0.0.1", 0))
    yield sock
    sock.close()


def test_c04_upgrade_socket_serves_a_head_in_pieces_and_leaves_what_follows(listener):
    hold = threading.Event()

    def answer(sock: socket.socket, request: bytes) -> None:
        sock.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpg")  # the head, cut in a line
        time.sleep(0.05)
        sock.sendall(b"rade: websocket\r\n\r\nREST")  # its end and 4 bytes past it

    server = _serve_once(listener, answer, hold)
    try:
        sock = transport.BufferedSocket.connect_to("127.0.0.1", listener.getsockname()[1], 5.0)
        with sock:
            sock.sendall(b"GET / HTTP/1.1\r\n\r\n")
            head = b""
            while not head.endswith(b"\r\n\r\n"):
                head += sock.recv(1)
            assert head == b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n"
            rest = b""
            while len(rest) < 4:
                rest += sock.recv(16)  # what the head's read took past the head, then the kernel
            assert rest == b"REST"
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    finally:
        hold.set()
        server.join(10)


def test_c04_the_frame_in_the_heads_segment_reaches_the_reader(listener, monkeypatch):
    # The bridge's close frame comes in the same write as the 101: had the head's read taken
    # it, the connection would stay open until the server let go.
    hold = threading.Event()

    def answer(sock: socket.socket, request: bytes) -> None:
        sock.sendall(_HEAD + b"Sec-WebSocket-Accept: " + _accept_for(request) + b"\r\n\r\n" + _CLOSE_FRAME)

    made = []
    connect_to = transport.BufferedSocket.connect_to
    monkeypatch.setattr(transport.BufferedSocket, "connect_to",
                        classmethod(lambda cls, *a: made.append(connect_to(*a)) or made[-1]))
    server = _serve_once(listener, answer, hold)
    try:
        conn = Connection(Endpoint(url=f"ws://127.0.0.1:{listener.getsockname()[1]}/", headers=()),
                          Redacted("t" * 32), open_timeout=5.0, ping_interval=5.0, ping_timeout=5.0)
        assert len(made) == 1  # the direct URL went through a BufferedSocket
        assert conn._reader is not None
        conn._reader.join(5)
        assert conn.closed and not conn._reader.is_alive()
        with pytest.raises(ConnectionLost):
            conn.call("Hello", None, timeout=1.0)
    finally:
        hold.set()
        server.join(10)


def test_c04_a_peer_that_closes_in_the_head_is_no_bridge(listener):
    hold = threading.Event()
    hold.set()

    def answer(sock: socket.socket, request: bytes) -> None:
        sock.sendall(b"HTTP/1.1 101 Switching")  # then the socket closes

    server = _serve_once(listener, answer, hold)
    try:
        with pytest.raises(ConnectionLost, match="cannot connect"):
            Connection(Endpoint(url=f"ws://127.0.0.1:{listener.getsockname()[1]}/", headers=()),
                       Redacted("t" * 32), open_timeout=5.0)
    finally:
        server.join(10)


def test_c04_tls_and_proxied_urls_keep_websocket_clients_own_connect(monkeypatch):
    monkeypatch.setenv("http_proxy", "http://proxy.invalid:3128")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    assert "socket" not in transport.open_options("wss://127.0.0.1:1/", None, 1.0)
    assert "socket" not in transport.open_options("ws://bridge.example:1/", None, 1.0)


def test_c04_buffered_socket_serves_every_byte_once_in_order(listener):
    hold = threading.Event()

    def answer(sock: socket.socket, request: bytes) -> None:
        sock.sendall(b"abcdefghij")
        time.sleep(0.05)
        sock.sendall(b"XYZ")

    server = _serve_once(listener, answer, hold)
    try:
        sock = transport.BufferedSocket.connect_to("127.0.0.1", listener.getsockname()[1], 5.0)
        with sock:
            sock.sendall(b"GET / HTTP/1.1\r\n\r\n")
            assert sock.recv(3) == b"abc"
            assert sock.recv(100) == b"defghij"  # what is kept, without waiting for more
            assert sock.recv(2) == b"XY"
            assert sock.recv(5) == b"Z"
            sock.settimeout(0.05)
            with pytest.raises(socket.timeout):
                sock.recv(1)  # nothing kept, nothing sent: the kernel is asked, and times out
    finally:
        hold.set()
        server.join(10)


def test_c04_mask_keys_are_handed_out_once_from_random_draws(monkeypatch):
    from bridge_client.client import randoms

    draws = []

    def urandom(n: int) -> bytes:
        draws.append(n)
        return bytes((len(draws) * 7 + i) % 256 for i in range(n))

    monkeypatch.setattr(randoms.os, "urandom", urandom)
    monkeypatch.setattr(randoms, "_POOL", randoms._Pool())
    keys = transport.MaskKeys()
    got = [keys(4) for _ in range(randoms._DRAW // 4 + 1)]
    assert all(len(k) == 4 for k in got)
    assert len(set(got[:64])) == 64  # none reused
    assert draws == [randoms._DRAW] * 2  # one draw per 1024 keys, then the next
    assert "get_mask_key" in transport.open_options("wss://127.0.0.1:1/", None, 1.0)

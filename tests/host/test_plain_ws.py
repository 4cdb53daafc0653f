"""A direct ws:// connection's own upgrade and frames (client/plain_ws.py) behave as
websocket-client's did on that path (C04): the upgrade checked, frames masked
and of every length form, a message in fragments joined, pings answered, a close echoed, and
what websocket-client refuses refused. Real sockets against a scripted peer."""
from __future__ import annotations

import socket
import struct
import sys
import threading
import time
from typing import Callable, List

import pytest
from upgrade_peer import accept_value, read_upgrade_request
import websocket

from bridge_client.client import transport
from bridge_client.client.connection import Connection
from bridge_client.client.plain_ws import PlainWebSocket
from bridge_client.errors import ConnectionLost, Unauthorized
from bridge_client.redacted import Redacted
from bridge_client.sandbox.base import Endpoint
from bridge_client.client import plain_ws as ws_frames  # the opcodes

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def _mask(key: bytes, payload: bytes) -> bytes:
    return bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def _frame(opcode: int, payload: bytes, fin: bool = True, rsv: int = 0, key: bytes = b"") -> bytes:
    """A frame as a server would write it (unmasked unless ``key``)."""
    n = len(payload)
    b0 = (0x80 if fin else 0) | rsv | opcode
    m = 0x80 if key else 0
    if n < 126:
        head = struct.pack("!BB", b0, m | n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", b0, m | 126, n)
    else:
        head = struct.pack("!BBQ", b0, m | 127, n)
    return head + key + (_mask(key, payload) if key else payload)


def _read_client_frame(sock: socket.socket, buf: bytearray) -> tuple:
    """One frame the client sent: (opcode, unmasked payload); asserts it was masked."""
    while True:
        if len(buf) >= 2:
            n, at = buf[1] & 0x7F, 2
            if n == 126 and len(buf) >= 4:
                n, at = int.from_bytes(buf[2:4], "big"), 4
            elif n == 127 and len(buf) >= 10:
                n, at = int.from_bytes(buf[2:10], "big"), 10
            if n < 126 or at > 2:
                assert buf[1] & 0x80, "a client frame must be masked"
                if len(buf) >= at + 4 + n:
                    key, payload = bytes(buf[at : at + 4]), bytes(buf[at + 4 : at + 4 + n])
                    opcode = buf[0] & 0x0F
                    del buf[: at + 4 + n]
                    return opcode, _mask(key, payload)
        data = sock.recv(65536)
        assert data, "the client closed the socket"
        buf += data


def _peer(listener: socket.socket, script: Callable[[socket.socket, bytes, bytearray], None],
          status: bytes = b"101 Switching Protocols", accept: bool = True) -> threading.Thread:
    def serve() -> None:
        sock, _ = listener.accept()
        with sock:
            request = read_upgrade_request(sock)
            head, _, rest = request.partition(b"\r\n\r\n")
            good = accept_value(request)
            sock.sendall(b"HTTP/1.1 " + status + b"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                         + b"Sec-WebSocket-Accept: " + (good if accept else b"bm9wZQ==") + b"\r\n\r\n")
            script(sock, head, bytearray(rest))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def listener():
    sock = socket.create_server(("127.0.0.1", 0))
    yield sock
    sock.close()


def _open(listener: socket.socket, headers: List[str] = ()) -> PlainWebSocket:  # type: ignore[assignment]
    port = listener.getsockname()[1]
    sock = transport.BufferedSocket.connect_to("127.0.0.1", port, 5.0)
    return PlainWebSocket.opened(sock, f"ws://127.0.0.1:{port}/path?q=1", list(headers))


def test_c04_plain_ws_frames_both_ways(listener):
    seen: dict = {}

    def script(sock: socket.socket, head: bytes, buf: bytearray) -> None:
        seen["head"] = head
        for size in (5, 300, 70_000):  # the 7-bit, 16-bit and 64-bit length forms
            seen[size] = _read_client_frame(sock, buf)
        big = _frame(ws_frames.OP_TEXT, b"y" * 70_000)
        # A ping between a message's fragments, the fragments cut across writes.
        data = (_frame(ws_frames.OP_TEXT, b"he", fin=False) + _frame(ws_frames.OP_PING, b"p!")
                + _frame(0x0, b"llo") + big
                + _frame(ws_frames.OP_PONG, b"") + _frame(ws_frames.OP_CLOSE, struct.pack("!H", 1000)))
        for i in range(0, 70, 7):
            sock.sendall(data[i : i + 7])  # the first frames in small pieces
        sock.sendall(data[70:])
        seen["pong"] = _read_client_frame(sock, buf)
        seen["close"] = _read_client_frame(sock, buf)

    server = _peer(listener, script)
    ws = _open(listener, ["X-Extra: 1", "Authorization: Bearer tok"])
    for size in (5, 300, 70_000):
        ws.send("x" * size)
    ws.settimeout(5.0)
    assert ws.recv_data() == (ws_frames.OP_TEXT, b"hello")
    assert ws.recv_data() == (ws_frames.OP_TEXT, b"y" * 70_000)
    opcode, payload = ws.recv_data()
    assert opcode == ws_frames.OP_CLOSE and payload == struct.pack("!H", 1000)
    server.join(10)
    ws.shutdown()
    assert seen[5] == (ws_frames.OP_TEXT, b"x" * 5) and seen[70_000] == (ws_frames.OP_TEXT, b"x" * 70_000)
    assert seen["pong"] == (ws_frames.OP_PONG, b"p!")
    assert seen["close"] == (ws_frames.OP_CLOSE, struct.pack("!H", 1000))  # the close echoed
    lines = seen["head"].split(b"\r\n")
    assert lines[0] == b"GET /path?q=1 HTTP/1.1"
    assert b"X-Extra: 1" in lines and b"Authorization: Bearer tok" in lines
    assert not any(line.lower().startswith(b"origin:") for line in lines)


@pytest.mark.parametrize("bad", [
    _frame(ws_frames.OP_TEXT, b"x", rsv=0x40),  # an extension nobody agreed
    _frame(0x3, b"x"),  # a reserved opcode
    _frame(ws_frames.OP_PING, b"x" * 126),  # a control frame too long
    _frame(0x0, b"x"),  # a continuation with no message begun
    _frame(ws_frames.OP_TEXT, b"x", key=b"\x01\x02\x03\x04"),  # masked by the server (RFC 6455 5.1)
])
def test_c04_plain_ws_refuses_frames_the_protocol_forbids(listener, bad):
    hold = threading.Event()

    def script(sock: socket.socket, head: bytes, buf: bytearray) -> None:
        sock.sendall(bad)
        hold.wait(10)

    server = _peer(listener, script)
    ws = _open(listener)
    ws.settimeout(5.0)
    try:
        with pytest.raises(websocket.WebSocketProtocolException):
            ws.recv_data()
    finally:
        hold.set()
        server.join(10)
        ws.shutdown()


def test_c04_plain_ws_upgrade_answers_map_to_the_connections_errors(listener):
    def nothing(sock: socket.socket, head: bytes, buf: bytearray) -> None:
        pass

    url = f"ws://127.0.0.1:{listener.getsockname()[1]}/"
    for status, accept, error in ((b"401 Unauthorized", True, Unauthorized),
                                  (b"101 Switching Protocols", False, ConnectionLost),
                                  (b"404 Not Found", True, ConnectionLost)):
        server = _peer(listener, nothing, status=status, accept=accept)
        with pytest.raises(error):
            Connection(Endpoint(url=url, headers=()), Redacted("t" * 32), open_timeout=5.0)
        server.join(10)


def test_c04_plain_ws_timeouts_hold_for_reads_and_writes(listener):
    # On Linux the timeout is the kernel's (one system call per read or write, no poll
    # first): a silent peer still ends a read, and a peer that reads nothing a write.
    hold = threading.Event()

    def silent(sock: socket.socket, head: bytes, buf: bytearray) -> None:
        hold.wait(10)  # reads nothing, says nothing

    server = _peer(listener, silent)
    ws = _open(listener)
    try:
        ws.settimeout(0.2)
        started = time.monotonic()
        with pytest.raises(websocket.WebSocketTimeoutException):
            ws.recv_data()
        assert 0.15 < time.monotonic() - started < 2.0
        started = time.monotonic()
        with pytest.raises(websocket.WebSocketTimeoutException):
            for _ in range(200):  # far more than the socket buffers hold
                ws.send(b"z" * (1 << 20), ws_frames.OP_BINARY)
        assert time.monotonic() - started < 5.0
        if sys.platform.startswith("linux"):
            assert ws.sock is not None and ws.sock.gettimeout() is None  # the kernel's timeouts
    finally:
        hold.set()
        server.join(10)
        ws.shutdown()


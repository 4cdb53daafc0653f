"""The bridge's connections on websockets' Sans-I/O protocol, one thread each
(``bridge/ws_connection.py``): what that model must keep of websockets' own sync server, and
the thread it saves. Over real sockets, against a real bridge process."""
from __future__ import annotations

import base64
import json
import os
import socket
import struct
from typing import Any, List

import pytest

from bridge_client.wire import frames
from bridge_harness import TOKEN, wait_until

pytestmark = pytest.mark.timeout(60)


def _threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise AssertionError("no Threads line")


def _upgrade(port: int) -> socket.socket:
    """A raw upgrade; returns the socket once the 101 head is read."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(_request(port, key))
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


def _request(port: int, key: str) -> bytes:
    return (
        f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
        f"Authorization: Bearer {TOKEN}\r\n\r\n"
    ).encode()


def _frame(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    """A masked client frame."""
    mask = os.urandom(4)
    head = bytes([(0x80 if fin else 0) | opcode])
    n = len(payload)
    if n < 126:
        head += bytes([0x80 | n])
    else:
        head += bytes([0x80 | 126]) + struct.pack("!H", n)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def _read_frame(sock: socket.socket) -> Any:
    """(opcode, payload) of the next server frame (unmasked)."""

    def exact(n: int) -> bytes:
        data = b""
        while len(data) < n:
            more = sock.recv(n - len(data))
            assert more, "the bridge closed the connection"
            data += more
        return data

    first, second = exact(2)
    n = second & 0x7F
    if n == 126:
        n = struct.unpack("!H", exact(2))[0]
    elif n == 127:
        n = struct.unpack("!Q", exact(8))[0]
    return first & 0x0F, exact(n)


def _hello(request_id: int) -> bytes:
    return json.dumps(frames.to_json(frames.Request(request_id, "Hello", None, ()))).encode()


def test_b08_each_connection_costs_the_bridge_one_thread(shared_echo):
    # websockets' sync server gave each connection two (a frame reader and the handler it hands
    # each message to); a host opening 100 sessions paid both, and a hand-off per frame.
    pid = shared_echo.proc.pid
    with shared_echo.connect() as first:
        assert first.value("Hello")["agentId"] == "echo"
        before = _threads(pid)
        clients: List[Any] = []
        try:
            for _ in range(10):
                c = shared_echo.connect()
                clients.append(c)
                assert c.value("Hello")["agentId"] == "echo"
            # (a turn's threads are pooled and idle; the count settles at once)
            assert wait_until(lambda: _threads(pid) <= before + 10, 5), (_threads(pid), before)
        finally:
            for c in clients:
                c.close()


def test_b08_frames_sent_in_the_same_write_as_the_upgrade_are_served(shared_echo):
    # A client may send its first frames right behind the request, before the 101 comes back:
    # they arrive in the same read as the request and must not be lost.
    port = shared_echo.info.port
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        key = base64.b64encode(os.urandom(16)).decode()
        sock.sendall(_request(port, key) + _frame(1, _hello(1)) + _frame(1, _hello(2)))
        head = b""
        while b"\r\n\r\n" not in head:
            head += sock.recv(1)
        assert head.startswith(b"HTTP/1.1 101"), head
        answers = [json.loads(_read_frame(sock)[1]) for _ in range(2)]
        assert [a["requestId"] for a in answers] == [1, 2]
        assert all(a["exit"]["_tag"] == "Success" for a in answers)
    finally:
        sock.close()


def test_b08_a_fragmented_message_is_served_whole(shared_echo):
    sock = _upgrade(shared_echo.info.port)
    try:
        data = _hello(7)
        parts = (_frame(1, data[:10], fin=False), _frame(0, data[10:20], fin=False), _frame(0, data[20:]))
        sock.sendall(b"".join(parts))
        opcode, payload = _read_frame(sock)
        answer = json.loads(payload)
        assert opcode == 1 and answer["exit"]["_tag"] == "Success", answer
        assert answer["exit"]["value"]["agentId"] == "echo"
    finally:
        sock.close()


def test_b08_a_websocket_ping_gets_its_pong_and_invalid_utf8_closes_with_1007(shared_echo):
    sock = _upgrade(shared_echo.info.port)
    try:
        sock.sendall(_frame(9, b"are-you-there"))
        assert _read_frame(sock) == (10, b"are-you-there")
        sock.sendall(_frame(1, b'{"_tag":"Ping","x":"\xff"}'))
        opcode, payload = _read_frame(sock)
        assert opcode == 8 and struct.unpack("!H", payload[:2])[0] == 1007
    finally:
        sock.close()
    with shared_echo.connect() as again:  # the bridge goes on
        assert again.value("Hello")["agentId"] == "echo"

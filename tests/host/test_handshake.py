"""The direct ws:// socket that reads the upgrade's response head in one go
(``bridge_client.client.handshake``): nothing past the head is taken, a head cut anywhere
still reads, failures are websocket-client's own, and wss:// or proxied URLs are left alone."""
from __future__ import annotations

import base64
import hashlib
import socket
import threading
import time
from typing import Callable, List

import pytest
import websocket

from bridge_client.client import handshake, transport
from bridge_client.client.connection import Connection
from bridge_client.errors import ConnectionLost, Unauthorized
from bridge_client.redacted import Redacted
from bridge_client.sandbox.base import Endpoint

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def _accept_for(request: bytes) -> bytes:
    for line in request.split(b"\r\n"):
        if line.lower().startswith(b"sec-websocket-key:"):
            key = line.split(b":", 1)[1].strip()
            return base64.b64encode(hashlib.sha1(key + _GUID).digest())
    raise AssertionError("no Sec-WebSocket-Key")


def _text_frame(text: bytes) -> bytes:
    assert len(text) < 126
    return bytes([0x81, len(text)]) + text


class _Server:
    """One-connection raw TCP server: reads the upgrade request, then runs ``answer(conn,
    request)``; stops by itself (bounded accept and reads)."""

    def __init__(self, answer: Callable[[socket.socket, bytes], None]) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(1)
        self._sock.settimeout(10)
        self.port = self._sock.getsockname()[1]
        self._answer = answer
        self.errors: List[BaseException] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            conn, _ = self._sock.accept()
            with conn:
                conn.settimeout(10)
                request = b""
                while b"\r\n\r\n" not in request:
                    data = conn.recv(4096)
                    if not data:
                        return
                    request += data
                self._answer(conn, request)
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)
        finally:
            self._sock.close()

    def join(self) -> None:
        self._thread.join(10)
        assert not self.errors, self.errors


def _head(request: bytes, extra: bytes = b"") -> bytes:
    return (
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: " + _accept_for(request) + b"\r\n" + extra + b"\r\n"
    )


def _open(port: int) -> websocket.WebSocket:
    url = f"ws://127.0.0.1:{port}/"
    return handshake.create_connection(
        url, transport.connect_options(url), timeout=5, suppress_origin=True, skip_utf8_validation=True
    )


def test_the_head_is_read_in_a_few_recvs_and_a_frame_right_behind_it_stays_for_websocket_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def answer(conn: socket.socket, request: bytes) -> None:
        conn.sendall(_head(request, b"X-Filler: " + b"f" * 300 + b"\r\n") + _text_frame(b"hello"))
        time.sleep(0.5)  # keep the socket open while the client reads

    server = _Server(answer)
    calls: List[int] = []
    real = socket.socket.recv

    def counting(self: socket.socket, *args: object) -> bytes:
        calls.append(1)
        return real(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(socket.socket, "recv", counting)
    ws = _open(server.port)
    during_upgrade = len(calls)
    try:
        assert ws.recv() == "hello"
        assert "recv" not in ws.sock.__dict__  # after the head, the socket's own recv
    finally:
        ws.close()
    server.join()
    assert during_upgrade <= 4, during_upgrade  # websocket-client alone: one per byte (~400 here)


def test_a_head_that_comes_a_byte_at_a_time_is_still_read_whole() -> None:
    def answer(conn: socket.socket, request: bytes) -> None:
        for byte in _head(request):
            conn.sendall(bytes([byte]))
            time.sleep(0.0005)
        conn.sendall(_text_frame(b"after"))
        time.sleep(0.5)

    server = _Server(answer)
    ws = _open(server.port)
    try:
        assert ws.recv() == "after"
    finally:
        ws.close()
    server.join()


def test_a_peer_that_closes_in_the_middle_of_the_head_is_a_lost_connection() -> None:
    def answer(conn: socket.socket, request: bytes) -> None:
        conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: webs")

    server = _Server(answer)
    with pytest.raises(ConnectionLost):
        Connection(Endpoint(f"ws://127.0.0.1:{server.port}/"), Redacted("t" * 32), open_timeout=5)
    server.join()


def test_c17_a_401_with_a_body_is_still_unauthorized() -> None:
    def answer(conn: socket.socket, request: bytes) -> None:
        body = b"missing or wrong bearer token\n"
        conn.sendall(
            b"HTTP/1.1 401 Unauthorized\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body
        )

    server = _Server(answer)
    with pytest.raises(Unauthorized):
        Connection(Endpoint(f"ws://127.0.0.1:{server.port}/"), Redacted("t" * 32), open_timeout=5)
    server.join()


def test_nothing_listening_is_a_lost_connection() -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    with pytest.raises(ConnectionLost):
        Connection(Endpoint(f"ws://127.0.0.1:{port}/"), Redacted("t" * 32), open_timeout=2)


def test_wss_and_proxied_urls_are_left_to_websocket_client(monkeypatch: pytest.MonkeyPatch) -> None:
    assert handshake.direct_socket("wss://127.0.0.1:1/", 1.0) is None
    monkeypatch.setenv("http_proxy", "http://proxy.example:3128")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    assert handshake.direct_socket("ws://bridge.example:80/", 1.0) is None

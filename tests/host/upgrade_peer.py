"""The server side of a WebSocket upgrade, for tests that script a peer on a raw socket."""
from __future__ import annotations

import base64
import hashlib
import socket

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def read_upgrade_request(sock: socket.socket) -> bytes:
    """Every byte the client sent up to the end of its request's head (and any after it in
    the same reads)."""
    request = b""
    while b"\r\n\r\n" not in request:
        data = sock.recv(4096)
        assert data, "the client closed the socket during its upgrade request"
        request += data
    return request


def accept_value(request: bytes) -> bytes:
    """The ``Sec-WebSocket-Accept`` value that answers ``request``'s key."""
    head = request.partition(b"\r\n\r\n")[0]
    key = [line.split(b":", 1)[1].strip() for line in head.split(b"\r\n")
           if line.lower().startswith(b"sec-websocket-key:")][0]
    return base64.b64encode(hashlib.sha1(key + _GUID).digest())

"""The client side of RFC 6455 for a direct ``ws://`` connection, without I/O: the upgrade
request and the check of its answer, masked frames to send, and the bridge's frames read from
bytes as they come.

Used by :mod:`bridge_client.client.plain_ws` (which does the socket's reads and writes) for
the connections that need neither TLS nor a proxy; those keep websocket-client's own code.
What is accepted and refused is what websocket-client accepts and refuses on that path: frames
from the server unmasked or masked, fragmented messages joined, no extensions (a set RSV bit
is an error), control frames whole and at most 125 bytes.
"""
from __future__ import annotations

import base64
import hashlib
import struct
from typing import Dict, Optional, Sequence, Tuple

__all__ = [
    "OP_CONT", "OP_TEXT", "OP_BINARY", "OP_CLOSE", "OP_PING", "OP_PONG",
    "FrameError", "upgrade_request", "read_upgrade_answer", "accept_matches", "client_frame",
    "mask", "FrameReader",
]

OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
_OPCODES = frozenset((OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG))
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
HEAD_LIMIT = 65536  # bytes of an upgrade answer's head before it counts as garbage


class FrameError(ValueError):
    """The bytes are not a frame (or an upgrade answer) this client accepts."""


def upgrade_request(resource: str, host: str, port: int, key: str, headers: Sequence[str]) -> bytes:
    """The upgrade's GET, with the header lines websocket-client sends (no ``Origin``), then
    ``headers`` (``"Name: value"`` lines) in order."""
    packed = f"[{host}]" if ":" in host and not host.startswith("[") else host
    hostport = packed if port == 80 else f"{packed}:{port}"
    lines = [
        f"GET {resource} HTTP/1.1",
        "Upgrade: websocket",
        f"Host: {hostport}",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
        "Connection: Upgrade",
        *headers,
        "",
        "",
    ]
    return "\r\n".join(lines).encode("utf-8")


def read_upgrade_answer(data: bytes) -> Optional[Tuple[int, str, Dict[str, str], int]]:
    """The upgrade answer's status, reason, headers (names in lower case) and length of its
    head, or ``None`` while ``data`` does not hold the whole head yet.

    Raises:
        FrameError: not an HTTP head, or a head longer than ``HEAD_LIMIT``.
    """
    end = data.find(b"\r\n\r\n")
    if end < 0:
        if len(data) > HEAD_LIMIT:
            raise FrameError("the upgrade's answer has no end of its head")
        return None
    try:
        lines = data[:end].decode("utf-8").split("\r\n")
    except UnicodeDecodeError as exc:
        raise FrameError(f"the upgrade's answer is not UTF-8 at byte {exc.start}") from None
    status_line = lines[0].strip().split(" ", 2)
    try:
        status = int(status_line[1])
    except (IndexError, ValueError):
        raise FrameError(f"invalid status line: {lines[0]!r}") from None
    reason = status_line[2] if len(status_line) > 2 else ""
    headers: Dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon:
            raise FrameError("invalid header line in the upgrade's answer")
        headers[name.strip().lower()] = value.strip()
    return status, reason, headers, end + 4


def accept_matches(headers: Dict[str, str], key: str) -> bool:
    """True when the 101's headers complete the upgrade for ``key``: ``Upgrade: websocket``,
    ``Connection: upgrade`` and the ``Sec-WebSocket-Accept`` that ``key`` asks for."""
    for name, want in (("upgrade", "websocket"), ("connection", "upgrade")):
        if want not in [v.strip().lower() for v in headers.get(name, "").split(",")]:
            return False
    expected = base64.b64encode(hashlib.sha1(key.encode("ascii") + _GUID).digest()).decode("ascii")
    return headers.get("sec-websocket-accept", "") == expected


def mask(key: bytes, data: bytes) -> bytes:
    """``data`` XOR the 4-byte ``key`` repeated (RFC 6455 5.3), as one big-integer XOR."""
    n = len(data)
    if not n:
        return b""
    keys = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "little") ^ int.from_bytes(keys, "little")).to_bytes(n, "little")


def client_frame(opcode: int, payload: bytes, mask_key: bytes) -> bytes:
    """One whole (FIN) frame from the client: masked with ``mask_key`` (4 bytes)."""
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 0xFE, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0xFF, n)
    return head + mask_key + mask(mask_key, payload)


class FrameReader:
    """The bridge's frames from the bytes read so far: :meth:`feed` what the socket gave,
    :meth:`next` for each whole frame, in order. A frame that comes in many reads is joined
    once (a ``bytearray`` grown at its end and cut at its start)."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        """Add bytes read from the socket after those fed before."""
        self._buf += data

    def next(self) -> Optional[Tuple[bool, int, bytes]]:
        """The next whole frame as ``(fin, opcode, payload)`` (unmasked), or ``None`` while
        its bytes are not all in.

        Raises:
            FrameError: a set RSV bit, an unknown opcode, a control frame that is fragmented or
                longer than 125 bytes.
        """
        buf = self._buf
        have = len(buf)
        if have < 2:
            return None
        b0, b1 = buf[0], buf[1]
        if b0 & 0x70:
            raise FrameError("a frame with an RSV bit set (no extension was agreed)")
        opcode = b0 & 0x0F
        if opcode not in _OPCODES:
            raise FrameError(f"a frame with the unknown opcode {opcode}")
        fin = bool(b0 & 0x80)
        length = b1 & 0x7F
        at = 2
        if length == 126:
            if have < 4:
                return None
            length = int.from_bytes(buf[2:4], "big")
            at = 4
        elif length == 127:
            if have < 10:
                return None
            length = int.from_bytes(buf[2:10], "big")
            at = 10
        if opcode >= OP_CLOSE and (not fin or length > 125):
            raise FrameError("a control frame fragmented or longer than 125 bytes")
        masked = b1 & 0x80
        end = at + (4 if masked else 0) + length
        if end > have:
            return None
        with memoryview(buf) as view:
            if masked:
                payload = mask(bytes(view[at : at + 4]), bytes(view[at + 4 : end]))
            else:
                payload = bytes(view[at:end])
        del buf[:end]
        return fin, opcode, payload

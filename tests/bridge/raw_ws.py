"""A raw WebSocket peer for the bridge's tests: hand-made frames over a plain socket, for the
things a well-behaved client library will not do (half frames, early frames, floods, a peer
that never reads). Used by tests/bridge/test_one_thread_connection_attacks.py."""
from __future__ import annotations

import base64
import json
import os
import socket
import struct
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from bridge_client.wire import frames

from bridge_harness import TOKEN

ZERO_MASK = b"\0\0\0\0"
"""A mask that leaves the payload as it is (for big payloads: no per-byte work)."""


def request_bytes(port: int, token: str = TOKEN, path: str = "/") -> bytes:
    """The HTTP upgrade request, with the bearer token."""
    key = base64.b64encode(os.urandom(16)).decode()
    return (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
        f"Authorization: Bearer {token}\r\n\r\n"
    ).encode()


def frame(
    opcode: int, payload: bytes, fin: bool = True, mask: Optional[bytes] = None, length: Optional[int] = None
) -> bytes:
    """A masked client frame; ``length``: the length its header claims (default: the payload's)."""
    mask = os.urandom(4) if mask is None else mask
    n = len(payload) if length is None else length
    head = bytes([(0x80 if fin else 0) | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + struct.pack("!H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", n)
    if mask == ZERO_MASK:
        return head + mask + payload
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def text(obj: Any) -> bytes:
    """A text frame of ``obj``: a wire message (``frames.Request`` etc.), or JSON data."""
    if not isinstance(obj, (dict, list, str)):
        obj = frames.to_json(obj)
    data = obj if isinstance(obj, str) else json.dumps(obj)
    return frame(1, data.encode("utf-8"))


def request(request_id: Any, tag: str, payload: Any = None) -> bytes:
    """A text frame of one request."""
    return text(frames.Request(request_id, tag, payload, ()))


def close_frame(code: int, reason: str = "") -> bytes:
    """A close frame."""
    return frame(8, struct.pack("!H", code) + reason.encode())


class Peer:
    """One raw connection: ``upgrade()``, then ``send`` bytes and read server frames."""

    def __init__(self, port: int, rcvbuf: Optional[int] = None, timeout: float = 5.0) -> None:
        self.port = port
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:  # before connect: the window is agreed then
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect(("127.0.0.1", port))
        self.buf = b""
        self.head = b""

    def upgrade(self, behind: bytes = b"", token: str = TOKEN) -> bytes:
        """Send the upgrade request (and ``behind`` in the same write); return the response head."""
        self.sock.sendall(request_bytes(self.port, token) + behind)
        self.head = self.read_head()
        return self.head

    def read_head(self) -> bytes:
        """Read the HTTP response head; what follows it stays buffered."""
        while b"\r\n\r\n" not in self.buf:
            more = self.sock.recv(65536)
            if not more:
                raise EOFError(f"closed before the response head: {self.buf!r}")
            self.buf += more
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        return head + b"\r\n\r\n"

    def send(self, data: bytes) -> None:
        """Send bytes."""
        self.sock.sendall(data)

    def _exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            more = self.sock.recv(max(65536, n - len(self.buf)))
            if not more:
                raise EOFError("the bridge closed the connection")
            self.buf += more
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def read_frame(self) -> Tuple[int, bytes]:
        """``(opcode, payload)`` of the next server frame (raises EOFError at the end)."""
        first, second = self._exact(2)
        assert not second & 0x80, "a server frame is never masked"
        n = second & 0x7F
        if n == 126:
            n = struct.unpack("!H", self._exact(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", self._exact(8))[0]
        return first & 0x0F, self._exact(n)

    def read_message(self) -> Any:
        """The next text frame as JSON, skipping pongs."""
        while True:
            opcode, payload = self.read_frame()
            if opcode == 1:
                return json.loads(payload)
            assert opcode == 10, (opcode, payload)

    def read_close(self) -> Tuple[int, bytes]:
        """Read until a close frame; return its ``(code, reason)``."""
        while True:
            opcode, payload = self.read_frame()
            if opcode == 8:
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
                return code, payload[2:]

    def at_eof(self) -> bool:
        """Whether the bridge ended the TCP stream (reads what is left; True on a reset too)."""
        try:
            while True:
                more = self.sock.recv(65536)
                if not more:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    def close(self) -> None:
        """Close the socket (no closing handshake)."""
        try:
            self.sock.close()
        except OSError:
            pass


# ---------------------------------------------------------------------- sessions, readers, attackers


def session(peer: Peer, sid: str, tid: str, prompt: str = "one two three") -> None:
    """OpenSession and StartTurn over ``peer`` (ids 1 and 2), answered."""
    peer.send(request(1, "OpenSession", {"sessionId": sid, "state": None}))
    peer.send(request(2, "StartTurn", {"sessionId": sid, "turnId": tid, "prompt": prompt}))
    seen = {}
    while len(seen) < 2:
        message = peer.read_message()
        if message["_tag"] == "Exit":
            seen[message["requestId"]] = message["exit"]
    assert all(e["_tag"] == "Success" for e in seen.values()), seen


def read_turn(sid: str, tid: str, offset: int = 0) -> Dict[str, Any]:
    """A ReadTurn payload."""
    return {"sessionId": sid, "turnId": tid, "offset": offset, "afterStep": 0}


class Victim(threading.Thread):
    """Reads a paced turn to its end over its own connection, noting when each Chunk came."""

    def __init__(self, port: int, sid: str, tid: str) -> None:
        super().__init__(daemon=True)
        self.peer = Peer(port, timeout=20)
        self.peer.upgrade()
        session(self.peer, sid, tid)
        self.sid, self.tid = sid, tid
        self.times: List[float] = []
        self.parts: List[Dict[str, Any]] = []
        self.error: Any = None

    def run(self) -> None:
        """Read the turn to its Exit (an error is kept in ``error``)."""
        try:
            self.peer.send(request(10, "ReadTurn", read_turn(self.sid, self.tid)))
            while True:
                message = self.peer.read_message()
                if message["_tag"] == "Exit":
                    return
                self.times.append(time.monotonic())
                self.parts.extend(message["values"])
                self.peer.send(text(frames.Ack(10)))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
        finally:
            self.peer.close()

    def gap(self, start: float, end: float) -> float:
        """The longest wait between two Chunks (or from ``start``) within ``[start, end]``."""
        times = [start] + [t for t in self.times if start < t <= end] + [end]
        return max(b - a for a, b in zip(times, times[1:]))


def attacker(port: int, sid: str, tid: str, pings: bool, until: float) -> threading.Thread:
    """A peer that reads a turn's first answers, then never reads again: it acks ahead (a host
    may ack what it did not read) and, with ``pings``, floods WebSocket pings."""
    peer = Peer(port, rcvbuf=4096, timeout=5)
    peer.upgrade()
    session(peer, sid, tid)
    peer.send(request(10, "ReadTurn", read_turn(sid, tid)))
    burst = text(frames.Ack(10))
    if pings:
        burst += frame(9, b"p" * 125) * 400  # 50 KB of pings: its pongs fill the socket in a second

    def run() -> None:
        peer.sock.settimeout(0.05)
        try:
            while time.monotonic() < until:
                try:
                    peer.send(burst)
                except socket.timeout:
                    pass  # its own connection is stuck: what it wanted (part of a burst may
                    # have gone: what follows is garbage to a bridge that reads it again)
                time.sleep(0.002)
        except OSError:
            pass  # dropped by the bridge
        finally:
            peer.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread

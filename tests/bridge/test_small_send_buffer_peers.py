"""Peers that shrink the bridge's send buffer and stop reading must stall only their own
connection. A peer that connects with a tiny receive buffer (``SO_RCVBUF``) and a small
``TCP_MAXSEG`` leaves the bridge's socket room for far less than 64 KiB (15-40 KB measured on
loopback: many small segments, each costing the kernel its overhead). The committing thread
(the store's writer, or a paced driver's own thread, under the store's commit lock) sends a
stream's Chunks and its Exit itself when they go at once; a send there that waits on such a
peer stalls every turn of the bridge. Real bridge processes (the Exit's test: the server in
process, tests/bridge/inproc_server.py), raw sockets (tests/bridge/raw_ws.py)."""
from __future__ import annotations

import socket
import threading
import time
from typing import Any, Dict, List

import pytest

from bridge_client.wire import frames

import raw_ws
from raw_ws import Peer

pytestmark = pytest.mark.timeout(90)

COUNTER = "hot_path_drivers:make_counter"
SEND_TIMEOUT = 4.0


class SmallWindowPeer(Peer):
    """A raw peer whose socket advertises a tiny receive window and small segments."""

    def __init__(self, port: int, mss: int, timeout: float = 5.0) -> None:  # noqa: D107
        self.port = port
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # Before connect: the window and the segment size are agreed then.
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)  # the kernel's least
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, mss)
        self.sock.settimeout(timeout)
        self.sock.connect(("127.0.0.1", port))
        self.buf = b""
        self.head = b""


def _texts(parts: List[Dict[str, Any]]) -> List[str]:
    return [p["text"] for p in parts if p["type"] == "text-delta"]


def _stalling_peer(port: int, sid: str, tid: str, mss: int, until: float) -> threading.Thread:
    """A peer that never reads its turn and acks ahead (a host may ack what it did not read)
    until ``until``: the bridge's socket to it fills while its turn goes on."""
    peer = SmallWindowPeer(port, mss)
    peer.upgrade()
    raw_ws.session(peer, sid, tid)
    peer.send(raw_ws.request(10, "ReadTurn", raw_ws.read_turn(sid, tid)))
    acks = raw_ws.text(frames.Ack(10)) * 20

    def run() -> None:
        peer.sock.settimeout(0.05)
        try:
            while time.monotonic() < until:
                try:
                    peer.send(acks)
                except socket.timeout:
                    pass  # its own connection is stuck: what it wanted
                time.sleep(0.005)
        except OSError:
            pass  # dropped by the bridge (its send timeout)
        finally:
            peer.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("mss", [300, 1300])
def test_b09_peers_of_a_small_window_that_never_read_stall_no_other_stream(make_bridge, mss):
    # Paced parts of about 300 bytes: each commit is its own (the driver's thread commits it),
    # and sends the Chunk at once when it may.
    count = 400
    bridge = make_bridge(
        COUNTER,
        options={"count": count, "delay": 0.01, "steps": 1, "size": 250},
        args=["--send-timeout", str(SEND_TIMEOUT)],
    )
    port = bridge.info.port
    until = time.monotonic() + 7.0
    peers = [_stalling_peer(port, f"s-bad-{i}", f"t-bad-{i}", mss, until) for i in range(2)]
    time.sleep(0.5)  # the victim's turn starts later: it runs on past the end of the peers' turns
    victim = raw_ws.Victim(port, "s-victim", "t-victim")
    start = time.monotonic()
    victim.start()
    for p in peers:
        p.join(12)
    victim.join(20)
    assert victim.error is None, victim.error
    assert _texts(victim.parts) == [f"<0:{i}>{'p' * 250}" for i in range(count)]
    assert victim.parts[-1]["type"] == "turn-finish"
    gap = victim.gap(start, victim.times[-1])
    assert gap < 1.5, f"the victim's stream stalled {gap:.2f} s (the send timeout is {SEND_TIMEOUT} s)"


# ---------------------------------------------------------------------- the Exit


def test_b09_the_exit_after_a_turn_finish_sent_at_once_waits_on_no_blocked_connection(tmp_path, monkeypatch):
    # The committing thread sent the turn-finish Chunk at once; right then the peer floods
    # pings and stops reading, so that the connection's own thread holds the WebSocket's lock
    # in a pong's sendall (the window between the two sends, widened here: the committing
    # thread waits until that is so before it goes on to the Exit). The Exit must not wait
    # for that lock in the committing thread: every turn of the bridge would wait with it.
    import hot_path_drivers
    import inproc_server
    from bridge_harness import TOKEN

    from bridge_client.bridge.connection import Connection

    attack_id = "r6-exit-attack"
    widened = threading.Event()
    flood = threading.Event()
    real_try_send = Connection.try_send

    def try_send(self: Connection, text: str) -> Any:
        sent = real_try_send(self, text)
        if sent and attack_id in text and '"turn-finish"' in text and not widened.is_set():
            flood.set()
            held = 0
            deadline = time.monotonic() + 3.0
            while held < 20 and time.monotonic() < deadline:  # 0.2 s held: its pong is blocked
                held = held + 1 if self._ws._lock.locked() else 0
                time.sleep(0.01)
            if held >= 20:
                widened.set()
        return sent

    monkeypatch.setattr(Connection, "try_send", try_send)
    monkeypatch.setattr(inproc_server, "TOKEN", TOKEN)  # the raw peers' token
    count = 200
    driver = hot_path_drivers.make_counter({"count": count, "delay": 0.01, "steps": 1})
    store = str(tmp_path / "bridge.sqlite3")
    with inproc_server.serving(store, driver, send_timeout=SEND_TIMEOUT) as (_, port):
        peer = SmallWindowPeer(port, 300)
        peer.upgrade()
        raw_ws.session(peer, "s-bad", "t-bad")
        peer.send(raw_ws.request(attack_id, "ReadTurn", raw_ws.read_turn("s-bad", "t-bad")))
        time.sleep(0.3)  # the victim's turn ends after the peer's
        victim = raw_ws.Victim(port, "s-victim", "t-victim")
        start = time.monotonic()
        victim.start()
        pings = raw_ws.frame(9, b"p" * 125) * 400

        def attack() -> None:
            try:
                while True:  # read and ack until the turn-finish, then never read again
                    message = peer.read_message()
                    assert message["_tag"] == "Chunk", message
                    peer.send(raw_ws.text(frames.Ack(attack_id)))
                    if message["values"][-1]["type"] == "turn-finish":
                        break
                assert flood.wait(5)
                peer.sock.settimeout(0.05)
                until = time.monotonic() + SEND_TIMEOUT + 1
                while time.monotonic() < until:
                    try:
                        peer.send(pings)
                    except socket.timeout:
                        pass
                    time.sleep(0.002)
            except OSError:
                pass  # dropped by the bridge (its send timeout)
            finally:
                peer.close()

        attacker = threading.Thread(target=attack, daemon=True)
        attacker.start()
        victim.join(20)
        attacker.join(10)
    assert widened.is_set(), "the connection's thread never blocked in a pong: the scenario did not happen"
    assert victim.error is None, victim.error
    assert _texts(victim.parts) == [f"<0:{i}>" for i in range(count)]
    gap = victim.gap(start, victim.times[-1])
    assert gap < 1.5, f"the victim's stream stalled {gap:.2f} s (the send timeout is {SEND_TIMEOUT} s)"

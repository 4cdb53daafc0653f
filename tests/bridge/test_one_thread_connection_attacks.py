"""Attacks on the bridge's one-thread connections (``bridge/ws_connection.py``): what a peer
that does not play by the rules can do to its own connection, and must not be able to do to
anyone else's. Real bridge processes, raw sockets (tests/bridge/raw_ws.py)."""
from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from typing import Any, Dict, List

import pytest

from bridge_client.wire import frames

import raw_ws
from bridge_harness import wait_until
from raw_ws import Peer

pytestmark = pytest.mark.timeout(90)

COUNTER = "hot_path_drivers:make_counter"
MIB = 1024 * 1024


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _texts(parts: List[Dict[str, Any]]) -> List[str]:
    return [p["text"] for p in parts if p["type"] == "text-delta"]


# ---------------------------------------------------------------------- pings


def test_b08_websocket_pings_and_protocol_pings_are_answered_while_a_turn_streams(make_bridge, sid, tid):
    bridge = make_bridge(COUNTER, options={"count": 30, "delay": 0.005, "steps": 1})
    peer = Peer(bridge.info.port)
    try:
        assert peer.upgrade().startswith(b"HTTP/1.1 101")
        raw_ws.session(peer, sid, tid)
        peer.send(raw_ws.request(10, "ReadTurn", raw_ws.read_turn(sid, tid)))
        sent_pings: List[bytes] = []
        pongs: List[bytes] = []
        json_pongs = 0
        json_pings = 0
        parts: List[Dict[str, Any]] = []
        hello = None
        n = 0
        while True:
            opcode, payload = peer.read_frame()
            if opcode == 10:
                pongs.append(payload)
                continue
            assert opcode == 1, (opcode, payload)
            message = json.loads(payload)
            if message["_tag"] == "Pong":
                json_pongs += 1
                continue
            if message["_tag"] == "Exit" and message["requestId"] == 11:
                hello = message["exit"]
                continue
            assert message["requestId"] == 10, message
            if message["_tag"] == "Exit":
                assert message["exit"]["_tag"] == "Success", message
                break
            parts.extend(message["values"])
            n += 1
            ping = (b"%d-" % n) * (125 // len(b"%d-" % n))  # up to the 125 bytes a ping may carry
            sent_pings.append(ping)
            out = raw_ws.text(frames.Ack(10)) + raw_ws.frame(9, ping) + raw_ws.text(frames.Ping())
            json_pings += 1
            if n == 2:  # a ping between the fragments of a message
                data = json.dumps(frames.to_json(frames.Request(11, "Hello", None, ()))).encode()
                sent_pings.append(b"between")
                out += raw_ws.frame(1, data[:7], fin=False) + raw_ws.frame(9, b"between")
                out += raw_ws.frame(0, data[7:])
            peer.send(out)
        # what was sent behind the last Chunk is answered too
        peer.send(raw_ws.frame(9, b"last") + raw_ws.text(frames.Ping()))
        sent_pings.append(b"last")
        json_pings += 1
        while len(pongs) < len(sent_pings) or json_pongs < json_pings:
            opcode, payload = peer.read_frame()
            if opcode == 10:
                pongs.append(payload)
            elif json.loads(payload)["_tag"] == "Pong":
                json_pongs += 1
        assert pongs == sent_pings
        assert json_pongs == json_pings
        assert hello is not None and hello["_tag"] == "Success", hello
        assert _texts(parts) == [f"<0:{i}>" for i in range(30)]
        assert parts[-1]["type"] == "turn-finish"
    finally:
        peer.close()


# ---------------------------------------------------------------------- the peer closes


def test_b04_a_close_from_the_peer_mid_stream_is_answered_and_the_turn_goes_on(make_bridge, sid, tid):
    bridge = make_bridge(COUNTER, options={"count": 150, "delay": 0.01, "steps": 1})
    pid = bridge.proc.pid
    with bridge.connect() as warm:  # the first connection's and turn's threads, pooled
        assert warm.value("Hello")["agentId"] == "echo"
    base = _threads(pid)
    peer = Peer(bridge.info.port)
    try:
        peer.upgrade()
        raw_ws.session(peer, sid, tid)
        peer.send(raw_ws.request(10, "ReadTurn", raw_ws.read_turn(sid, tid)))
        for _ in range(3):
            message = peer.read_message()
            assert message["_tag"] == "Chunk", message
            peer.send(raw_ws.text(frames.Ack(10)))
        peer.send(raw_ws.close_frame(1000, "bye"))
        started = time.monotonic()
        assert peer.read_close() == (1000, b"bye")
        assert peer.at_eof()
        assert time.monotonic() - started < 1.5
    finally:
        peer.close()
    with bridge.connect() as again:  # B04: the turn ran on without its reader
        parts, _, exit_ = again.read(sid, tid)
        assert exit_["_tag"] == "Success"
        assert _texts(parts) == [f"<0:{i}>" for i in range(150)]
    assert wait_until(lambda: _threads(pid) <= base + 1, 5), (_threads(pid), base)
    assert "Traceback" not in bridge.log()


# ---------------------------------------------------------------------- stalls


def test_b09_half_a_handshake_holds_only_its_connection_and_its_timeout_holds(make_bridge):
    bridge = make_bridge(args=["--handshake-timeout", "2"])
    port = bridge.info.port
    half = Peer(port, timeout=8)
    loris = Peer(port, timeout=8)
    try:
        started = time.monotonic()
        half.send(raw_ws.request_bytes(port)[:30])
        request = raw_ws.request_bytes(port)

        def drip() -> None:  # a byte every 0.1 s: never done within the timeout
            try:
                for b in request[:-4]:
                    loris.send(bytes([b]))
                    time.sleep(0.1)
            except OSError:
                pass

        dripper = threading.Thread(target=drip, daemon=True)
        dripper.start()
        with bridge.connect() as other:  # served meanwhile, at once
            assert other.value("Hello")["agentId"] == "echo"
            assert time.monotonic() - started < 1.5  # not after the 2 s timeout
        assert half.at_eof()
        assert loris.at_eof()
        assert time.monotonic() - started < 5.0
    finally:
        half.close()
        loris.close()


def test_b08_half_a_frame_holds_only_its_connection(make_bridge, sid, tid):
    bridge = make_bridge(options={"steps": 2, "chunks": 3})
    stalled = Peer(bridge.info.port)
    try:
        stalled.upgrade()
        stalled.send(b"\x81\xfe\x01")  # a text frame's first header bytes, and no more
        with bridge.connect() as other:
            other.open(sid)
            assert other.start(sid, tid, "a b c") == "started"
            parts, _, exit_ = other.read(sid, tid)
            assert exit_["_tag"] == "Success" and parts[-1]["type"] == "turn-finish"
        stalled.send(b"\x00")  # still not a whole header: the connection waits, it is not failed
        stalled.sock.settimeout(0.3)
        with pytest.raises(socket.timeout):
            stalled.read_frame()
    finally:
        stalled.close()


# ---------------------------------------------------------------------- bad frames


def test_b08_a_frame_over_max_size_closes_1009_and_the_bridge_serves_others(make_bridge):
    bridge = make_bridge()
    big = Peer(bridge.info.port)
    fragmented = Peer(bridge.info.port)
    try:
        big.upgrade()
        big.send(raw_ws.frame(1, b"", length=16 * MIB + 1, mask=raw_ws.ZERO_MASK))  # the header says it
        assert big.read_close()[0] == 1009
        assert big.at_eof()
        # A message whose fragments add up to more: the second one's header is enough.
        fragmented.upgrade()
        fragmented.send(raw_ws.frame(1, b"x" * (9 * MIB), fin=False, mask=raw_ws.ZERO_MASK))
        fragmented.send(raw_ws.frame(0, b"", length=9 * MIB, mask=raw_ws.ZERO_MASK))
        assert fragmented.read_close()[0] == 1009
        assert fragmented.at_eof()
        with bridge.connect() as other:
            assert other.value("Hello")["agentId"] == "echo"
    finally:
        big.close()
        fragmented.close()


def test_b08_fragmented_messages_whole_split_utf8_and_misordered_fragments(make_bridge):
    bridge = make_bridge()
    peer = Peer(bridge.info.port)
    bad = Peer(bridge.info.port)
    try:
        peer.upgrade()
        rid = "id-é-\U0001f600"  # a character of 2 bytes and one of 4, each split across fragments
        data = json.dumps(frames.to_json(frames.Request(rid, "Hello", None, ())), ensure_ascii=False).encode()
        cut1 = data.index("é".encode()) + 1
        cut2 = data.index("\U0001f600".encode()) + 2
        peer.send(
            raw_ws.frame(1, data[:cut1], fin=False)
            + raw_ws.frame(0, data[cut1:cut2], fin=False)
            + raw_ws.frame(0, data[cut2:])
        )
        answer = peer.read_message()
        assert answer["requestId"] == rid and answer["exit"]["_tag"] == "Success", answer
        bad.upgrade()
        bad.send(raw_ws.frame(0, b"a continuation of nothing"))
        assert bad.read_close()[0] == 1002
        assert bad.at_eof()
        peer.send(raw_ws.request(2, "Hello"))  # the other connection goes on
        assert peer.read_message()["exit"]["_tag"] == "Success"
    finally:
        peer.close()
        bad.close()


@pytest.mark.parametrize(
    "bad",
    [
        raw_ws.frame(9, b"x" * 126),  # a control frame over 125 bytes
        raw_ws.frame(9, b"half", fin=False),  # a fragmented control frame
        b"\x81\x05hello",  # a client frame without its mask
        b"\xc1\x80\0\0\0\0",  # a reserved bit (no extension was agreed)
        b"\x83\x80\0\0\0\0",  # a reserved opcode
    ],
    ids=["big-control", "fragmented-control", "unmasked", "rsv1", "opcode-3"],
)
def test_b08_a_frame_that_breaks_the_websocket_protocol_closes_1002_and_only_its_connection(make_bridge, bad):
    bridge = make_bridge()
    peer = Peer(bridge.info.port)
    try:
        peer.upgrade()
        peer.send(bad)
        assert peer.read_close()[0] == 1002
        assert peer.at_eof()
    finally:
        peer.close()
    with bridge.connect() as other:
        assert other.value("Hello")["agentId"] == "echo"


def test_b08_a_message_of_megabytes_is_read_whole(make_bridge):
    bridge = make_bridge()
    peer = Peer(bridge.info.port)
    try:
        peer.upgrade()
        rid = "r" * (3 * MIB)  # one message of 3 MiB, read 64 KiB at a time
        data = json.dumps(frames.to_json(frames.Request(rid, "Hello", None, ()))).encode()
        peer.send(raw_ws.frame(1, data, mask=raw_ws.ZERO_MASK))
        answer = peer.read_message()
        assert answer["requestId"] == rid and answer["exit"]["_tag"] == "Success"
    finally:
        peer.close()


def test_b08_invalid_utf8_closes_1007_and_nothing_behind_it_is_served(make_bridge, sid, tid):
    bridge = make_bridge()
    peer = Peer(bridge.info.port)
    try:
        peer.upgrade()
        peer.send(raw_ws.request(1, "OpenSession", {"sessionId": sid, "state": None}))
        assert peer.read_message()["exit"]["_tag"] == "Success"
        start = raw_ws.request(2, "StartTurn", {"sessionId": sid, "turnId": tid, "prompt": "x"})
        # invalid UTF-8 across two fragments, then a request in the same write
        peer.send(raw_ws.frame(1, b'{"_tag":"Ping","x":"\xc3', fin=False) + raw_ws.frame(0, b'("}') + start)
        code, _ = peer.read_close()
        assert code == 1007
        assert peer.at_eof()
    finally:
        peer.close()
    with bridge.connect() as other:  # the StartTurn behind the bad frame was not served
        other.open(sid)
        assert other.start(sid, tid, "x") == "started"


# ---------------------------------------------------------------------- right behind the upgrade


def test_b08_a_ping_right_behind_the_upgrade_is_answered_after_the_101(make_bridge):
    bridge = make_bridge()
    peer = Peer(bridge.info.port)
    try:
        head = peer.upgrade(behind=raw_ws.frame(9, b"early") + raw_ws.request(1, "Hello"))
        assert head.startswith(b"HTTP/1.1 101"), head
        assert peer.read_frame() == (10, b"early")
        assert peer.read_message()["exit"]["_tag"] == "Success"
    finally:
        peer.close()


def test_b08_frames_behind_a_request_whose_end_came_in_two_reads_are_served_after_the_101(make_bridge):
    # The head's end ("\r\n\r\n") split across two reads, a ping and a request behind it.
    bridge = make_bridge()
    peer = Peer(bridge.info.port)
    try:
        request = raw_ws.request_bytes(bridge.info.port)
        peer.send(request[:-2])
        time.sleep(0.2)  # read on its own by the bridge
        peer.send(request[-2:] + raw_ws.frame(9, b"split") + raw_ws.request(1, "Hello"))
        head = peer.read_head()
        assert head.startswith(b"HTTP/1.1 101"), head
        assert peer.read_frame() == (10, b"split")
        assert peer.read_message()["exit"]["_tag"] == "Success"
    finally:
        peer.close()


def test_b08_a_close_right_behind_the_upgrade_gets_the_101_then_the_close(make_bridge):
    # (A close read with a request answers the close first, as websockets does at any time:
    # the request's answer cannot follow a close.)
    bridge = make_bridge()
    peer = Peer(bridge.info.port)
    try:
        head = peer.upgrade(behind=raw_ws.request(1, "Hello") + raw_ws.close_frame(1000))
        assert head.startswith(b"HTTP/1.1 101"), head
        assert peer.read_frame() == (8, b"\x03\xe8")
        assert peer.at_eof()
    finally:
        peer.close()
    with bridge.connect() as other:
        assert other.value("Hello")["agentId"] == "echo"


# ---------------------------------------------------------------------- a peer that never reads


@pytest.mark.parametrize("pings", [False, True], ids=["acks-ahead", "acks-and-ping-flood"])
def test_b09_peers_that_never_read_a_stream_do_not_stall_other_streams(make_bridge, pings):
    # Every commit pokes the turn's streams in the committing thread, which holds the store's
    # commit: a send there that waits on a peer that does not read stalls every turn.
    options = {"count": 700, "delay": 0.01, "steps": 1}
    bridge = make_bridge(COUNTER, options=options, args=["--send-timeout", "4"])
    port = bridge.info.port
    victim = raw_ws.Victim(port, "s-victim", "t-victim")
    victim.start()
    start = time.monotonic()
    until = start + 6.0
    attackers = [raw_ws.attacker(port, f"s-bad-{i}", f"t-bad-{i}", pings, until) for i in range(3)]
    for a in attackers:
        a.join(10)
    end = time.monotonic()
    victim.join(20)
    assert victim.error is None, victim.error
    assert _texts(victim.parts) == [f"<0:{i}>" for i in range(700)]
    gap = victim.gap(start, end)
    assert gap < 1.5, f"the victim's stream stalled {gap:.2f} s (the send timeout is 4 s)"


# ---------------------------------------------------------------------- many, quickly


def _churn(port: int, i: int) -> None:
    """One short-lived connection; ``i`` picks how it ends."""
    mode = i % 7
    peer = Peer(port, timeout=5)
    try:
        if mode == 0:
            return  # connected, and gone at once
        if mode == 1:
            peer.send(raw_ws.request_bytes(port)[:40])  # half a request, gone
            return
        if mode == 2:
            assert peer.upgrade(token="wrong").startswith(b"HTTP/1.1 401")
            return
        assert peer.upgrade().startswith(b"HTTP/1.1 101")
        if mode == 3:  # a reset: no close, unread data on neither side
            peer.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
            return
        peer.send(raw_ws.request(1, "Hello"))
        if mode == 4:
            return  # gone before its answer
        assert peer.read_message()["exit"]["_tag"] == "Success"
        if mode == 5:
            return  # gone without a close
        peer.send(raw_ws.close_frame(1000))
        assert peer.read_close()[0] == 1000
    finally:
        peer.close()


def test_b09_connections_opened_and_dropped_quickly_leave_no_thread_file_or_slot(make_bridge):
    bridge = make_bridge(args=["--max-connections", "16"])
    pid, port = bridge.proc.pid, bridge.info.port
    for i in range(7):
        _churn(port, i)  # every kind once: whatever is made once (pools, caches) is made now
    time.sleep(0.3)
    threads, fds = _threads(pid), _fds(pid)
    workers = [
        threading.Thread(target=lambda k=k: [_churn(port, i) for i in range(k, 280, 4)]) for k in range(4)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    assert wait_until(lambda: _threads(pid) <= threads and _fds(pid) <= fds, 10), (
        f"threads {_threads(pid)} (were {threads}), files {_fds(pid)} (were {fds})"
    )
    full = [Peer(port) for _ in range(16)]  # every slot of the gate was given back
    try:
        for p in full:
            assert p.upgrade().startswith(b"HTTP/1.1 101"), p.head
    finally:
        for p in full:
            p.close()
    assert "Traceback" not in bridge.log()


# ---------------------------------------------------------------------- shutdown


def test_b09_shutdown_with_connections_in_every_state_ends_within_its_bound(make_bridge):
    bridge = make_bridge(
        COUNTER,
        options={"count": 5000, "delay": 0.002, "steps": 1},
        args=["--handshake-timeout", "60", "--send-timeout", "60", "--cancel-grace", "1"],
    )
    port = bridge.info.port
    peers: List[Peer] = []
    try:
        peers.append(Peer(port))  # connected, nothing sent
        half = Peer(port)
        half.send(raw_ws.request_bytes(port)[:50])  # half a request
        peers.append(half)
        idle = Peer(port)
        idle.upgrade()  # open, idle
        peers.append(idle)
        half_frame = Peer(port)
        half_frame.upgrade()
        half_frame.send(b"\x81\xfe")  # half a frame
        peers.append(half_frame)
        closing = Peer(port)
        closing.upgrade()
        closing.send(raw_ws.close_frame(1000))  # a close, and then it never reads nor ends
        peers.append(closing)
        reader = raw_ws.Victim(port, "s-reading", "t-reading")  # a stream read as it goes
        reader.start()
        until = time.monotonic() + 30
        stuck = [raw_ws.attacker(port, f"s-stuck-{i}", f"t-stuck-{i}", i == 1, until) for i in range(2)]
        assert wait_until(lambda: len(reader.times) > 5, 10)
        time.sleep(1.0)  # the attackers' sockets are full by now
        started = time.monotonic()
        bridge.signal(signal.SIGTERM)
        code = bridge.wait(15)
        took = time.monotonic() - started
        assert code == 0, bridge.log()[-3000:]
        assert took < 8.0, f"shutdown took {took:.1f} s"
        reader.join(5)
        for t in stuck:
            t.join(0)
    finally:
        for p in peers:
            p.close()

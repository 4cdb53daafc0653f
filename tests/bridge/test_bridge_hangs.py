"""No endless wait in the bridge (C20, B09): a cancel the driver ignores ends the turn after a
grace period; a peer that does not read cannot hold a send, nor the shutdown."""
from __future__ import annotations

import json
import os
import signal
import time

import pytest
import websocket

from bridge_harness import TOKEN, wait_until
from bridge_client.wire import frames

pytestmark = pytest.mark.timeout(60)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _read_until_finish(c, sid, tid, timeout):
    """ReadTurn from 0, acking, until turn-finish or ``timeout`` seconds; returns the parts."""
    c.ws.settimeout(timeout)
    rid = c.request("ReadTurn", {"sessionId": sid, "turnId": tid, "offset": 0, "afterStep": 0})
    parts = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            message = c.recv()
        except websocket.WebSocketTimeoutException:
            break
        if message.get("requestId") != rid:
            continue
        if message["_tag"] == "Chunk":
            parts.extend(message["values"])
            c.send(frames.Ack(rid))
        else:
            break
    return parts


def test_c20_a_cancel_the_driver_ignores_ends_the_turn_after_the_grace(make_bridge, sid, tid):
    bridge = make_bridge(
        "bridge_test_drivers:make_stubborn",
        options={"hold": 4.0},
        agent_id="echo",
        args=["--cancel-grace", "0.5"],
    )
    pid_file = os.path.join(bridge.workspace, "stubborn.pid")
    with bridge.connect() as c:
        c.open(sid)
        assert c.start(sid, tid, "go") == "started"
        assert wait_until(lambda: os.path.exists(pid_file), 10)
        child = int(open(pid_file).read())
        assert _alive(child)
        asked = time.monotonic()
        assert c.value("CancelTurn", {"sessionId": sid, "turnId": tid})["status"] == "running"
        parts = _read_until_finish(c, sid, tid, timeout=3.0)
        took = time.monotonic() - asked
        assert parts and parts[-1]["type"] == "turn-finish", f"no turn-finish {took:.1f} s after the cancel"
        assert parts[-1]["finishReason"] == "cancelled"
        kinds = [p["type"] for p in parts]
        assert kinds == ["turn-start", "step-start", "text-delta", "step-finish", "turn-finish"]
        assert parts[3]["finishReason"] == "cancelled", "the open step is closed as cancelled"
        assert wait_until(lambda: not _alive(child), 5), "the reported process group was killed"
        # The abandoned driver thread wakes up and emits: nothing of it reaches the log.
        assert wait_until(lambda: os.path.exists(os.path.join(bridge.workspace, "late.marker")), 10)
        time.sleep(0.3)
        again = _read_until_finish(c, sid, tid, timeout=5.0)
        assert again == parts
        assert c.start(sid, tid, "go") == "finished"
        assert c.value("Hello")["agentId"] == "echo"
    assert "ignored its cancel" in bridge.log()


def _big_turn(c, sid, tid):
    """A finished turn of 8 parts of 1 MiB of text each (echo, 8 steps, 1 chunk per step)."""
    c.open(sid)
    c.start(sid, tid, "x" * (1 << 20))
    parts, _, exit_ = c.read(sid, tid)
    assert exit_["_tag"] == "Success" and parts[-1]["type"] == "turn-finish"


def _flood_without_reading(bridge, sid, tid, streams=12):
    """A connection that asks for the big turn ``streams`` times at once and never reads: the
    bridge's sends block once the socket buffers are full."""
    ws = websocket.create_connection(bridge.url, header=[f"Authorization: Bearer {TOKEN}"], timeout=5)
    batch = [
        frames.to_json(frames.Request(str(i), "ReadTurn", {"sessionId": sid, "turnId": tid, "offset": 0}, ()))
        for i in range(streams)
    ]
    ws.send(json.dumps(batch))
    return ws


def test_b09_sigterm_ends_the_bridge_while_a_peer_does_not_read(make_bridge, sid, tid):
    bridge = make_bridge(options={"steps": 8, "chunks": 1})
    with bridge.connect() as c:
        _big_turn(c, sid, tid)
    ws = _flood_without_reading(bridge, sid, tid)
    try:
        time.sleep(1.5)  # the sends fill the socket buffers and block
        assert bridge.proc.poll() is None
        asked = time.monotonic()
        bridge.signal(signal.SIGTERM)
        try:
            code = bridge.wait(12)
        except Exception:
            pytest.fail(f"the bridge did not exit within 12 s of SIGTERM:\n{bridge.log()[-3000:]}")
        took = time.monotonic() - asked
        assert code == 0
        assert took < 12
        assert not os.path.exists(bridge.listening_path)
    finally:
        ws.sock.close() if ws.sock else None


def test_b09_a_send_the_peer_does_not_take_drops_its_connection_only(make_bridge, sid, tid):
    bridge = make_bridge(options={"steps": 8, "chunks": 1}, args=["--send-timeout", "1"])
    with bridge.connect() as c:
        _big_turn(c, sid, tid)
    ws = _flood_without_reading(bridge, sid, tid)
    try:
        with bridge.connect() as other:  # served meanwhile
            assert other.value("Hello")["agentId"] == "echo"
            assert wait_until(lambda: "a send did not complete" in bridge.log(), 15), bridge.log()[-3000:]
            assert other.value("Hello")["agentId"] == "echo"
            parts, _, exit_ = other.read(sid, tid)
            assert exit_["_tag"] == "Success" and parts[-1]["type"] == "turn-finish"
    finally:
        ws.sock.close() if ws.sock else None
    assert bridge.proc.poll() is None

"""Attacks on the send at once and the batch answer: a host that
acks without reading, or that stopped reading before a wide (non-ASCII) part, must not make
a committing thread wait on its socket; an Ack sent before the stream's first Chunk must not
send a Chunk ahead of StartTurn's batch answer. Real sockets, a real bridge server in this
process, a websocket-client host."""
from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any, List

import pytest
import websocket

from bridge_client.bridge.driver import TurnContext
from bridge_client.wire.frames import Ack
from inproc_server import serving

pytestmark = pytest.mark.timeout(90)

SEND_TIMEOUT = 20.0  # what a committing thread would wait on a full socket
PARTS = 300
BIG = "x" * 30_000  # each part's text (one per Chunk, paced): the socket fills after a few


class _BigDriver:
    """One step of PARTS big text-deltas, as fast as they go; records the longest ctx.text."""

    agent_id = "echo"

    def __init__(self) -> None:
        self.longest = 0.0
        self.done = threading.Event()

    def initial_state(self) -> Any:
        return None

    def run_turn(self, ctx: TurnContext) -> None:
        ctx.start_step()
        for _ in range(PARTS):
            t0 = time.monotonic()
            ctx.text(BIG)
            self.longest = max(self.longest, time.monotonic() - t0)
            time.sleep(0.002)  # paced: each part committed and sent on its own
        ctx.finish_step()
        self.done.set()


@pytest.fixture
def bridge(tmp_path):
    driver = _BigDriver()
    with serving(str(tmp_path / "bridge.sqlite3"), driver, send_timeout=SEND_TIMEOUT) as (manager, port):
        yield manager, port, driver


def _connect(port: int) -> websocket.WebSocket:
    ws = websocket.WebSocket()
    ws.sock_opt.sockopt.append((socket.SOL_SOCKET, socket.SO_RCVBUF, 4096))
    ws.connect(f"ws://127.0.0.1:{port}/", header=["Authorization: Bearer tok"], timeout=30)
    return ws


def test_b04_a_host_that_acks_without_reading_does_not_hold_the_committing_thread(bridge):
    manager, port, driver = bridge
    ws = _connect(port)
    stop = threading.Event()
    try:
        def call(rid: str, tag: str, payload: Any) -> Any:
            ws.send(json.dumps({"_tag": "Request", "id": rid, "tag": tag, "payload": payload, "headers": []}))
            while True:
                message = json.loads(ws.recv())
                for m in message if isinstance(message, list) else [message]:
                    if m.get("_tag") == "Exit" and m.get("requestId") == rid:
                        return m["exit"]

        assert call("o", "OpenSession", {"sessionId": "s1", "state": None})["_tag"] == "Success"
        assert call("s", "StartTurn", {"sessionId": "s1", "turnId": "t1", "prompt": "p"})["_tag"] == "Success"
        read = {"_tag": "Request", "id": "r", "tag": "ReadTurn",
                "payload": {"sessionId": "s1", "turnId": "t1", "offset": 0, "afterStep": 0}, "headers": []}
        ws.send(json.dumps(read))

        def lie() -> None:  # Acks as fast as they go, never a read: the host lies
            while not stop.is_set():
                try:
                    ws.send('{"_tag":"Ack","requestId":"r"}')
                except Exception:
                    return
                time.sleep(0.0005)

        liar = threading.Thread(target=lie, daemon=True)
        liar.start()
        finished = driver.done.wait(SEND_TIMEOUT * 0.6)
        assert finished, "the driver's ctx.text waited on a host that does not read"
        assert driver.longest < SEND_TIMEOUT / 2, driver.longest
    finally:
        stop.set()
        ws.sock.close()


@pytest.fixture
def paced_bridge(tmp_path):
    from bridge_client.drivers import echo

    with serving(str(tmp_path / "bridge.sqlite3"), echo.EchoDriver(delay=0.002, chunks=20)) as served:
        yield served


def test_b03_an_early_ack_during_the_batch_answer_sends_nothing_before_the_batch(paced_bridge, monkeypatch):
    # A host may ack a stream's Chunk before it got it (it picks the request id). Such an Ack,
    # handled by another thread just as the StartTurn's batch answer is gathered (stood in
    # for here by the connection's own thread, right after the stream started), must not
    # send that stream's next Chunk ahead of the batch: the host gets StartTurn's Exit first.
    from bridge_client.bridge import read_stream

    manager, port = paced_bridge
    start = read_stream.ReadStream.start

    def start_then_early_ack(self: Any) -> None:
        start(self)
        time.sleep(0.05)  # parts are committed meanwhile
        self.conn._message(Ack(self.request_id))

    monkeypatch.setattr(read_stream.ReadStream, "start", start_then_early_ack)
    ws = websocket.create_connection(
        f"ws://127.0.0.1:{port}/", header=["Authorization: Bearer tok"], timeout=20
    )
    try:
        manager.open_session("s", None)
        payload = {"sessionId": "s", "turnId": "t", "prompt": " ".join(f"w{i}" for i in range(20))}
        pair: List[Any] = [
            {"_tag": "Request", "id": "1", "tag": "StartTurn", "payload": payload, "headers": []},
            {"_tag": "Request", "id": "2", "tag": "ReadTurn", "headers": [],
             "payload": {"sessionId": "s", "turnId": "t", "offset": 0, "afterStep": 0}},
        ]
        ws.send(json.dumps(pair))
        first = json.loads(ws.recv())
        head = first[0] if isinstance(first, list) else first
        assert (head["_tag"], head["requestId"]) == ("Exit", "1"), f"not the answer first: {first!r}"
        batch = first if isinstance(first, list) else [first]
        seen = [v for m in batch[1:] if m["_tag"] == "Chunk" for v in m["values"]]
        while True:
            got = json.loads(ws.recv())
            for m in got if isinstance(got, list) else [got]:
                if m["_tag"] == "Chunk":
                    seen.extend(m["values"])
                    ws.send('{"_tag":"Ack","requestId":"2"}')
                elif m["_tag"] == "Exit" and m["requestId"] == "2":
                    assert [v["index"] for v in seen] == list(range(len(seen)))
                    return
    finally:
        ws.close()


class _WideDriver:
    """A short part, then (once ``go`` is set) one part of 60,000 three-byte characters: a
    Chunk under the bound of a send at once in characters, three times over it in bytes."""

    agent_id = "echo"

    def __init__(self) -> None:
        self.go = threading.Event()
        self.done = threading.Event()

    def initial_state(self) -> Any:
        return None

    def run_turn(self, ctx: TurnContext) -> None:
        ctx.start_step()
        ctx.text("first")
        self.go.wait(20)
        time.sleep(0.05)  # the first Chunk's Ack is in
        ctx.text("\u20ac" * 60_000)
        ctx.finish_step()
        self.done.set()


def test_b04_a_wide_part_for_a_host_that_stopped_reading_does_not_hold_the_committing_thread(
    tmp_path, monkeypatch
):
    # A socket whose send buffer is not the loopback's megabytes (as on a real network at the
    # start of a connection): the check of a send at once must count a frame's bytes, not its
    # characters, or the committing thread sends 180 kB into a buffer that holds less.
    from bridge_client.bridge import listener

    set_timeout = listener.set_send_timeout

    def small_buffer(sock: socket.socket, seconds: float) -> None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 80_000)  # the kernel doubles it
        set_timeout(sock, seconds)

    monkeypatch.setattr(listener, "set_send_timeout", small_buffer)
    driver = _WideDriver()
    with serving(str(tmp_path / "bridge.sqlite3"), driver, send_timeout=SEND_TIMEOUT) as (manager, port):
        ws = _connect(port)
        try:
            manager.open_session("s", None)
            manager.start_turn("s", "t", "p")
            read = {"_tag": "Request", "id": "r", "tag": "ReadTurn", "headers": [],
                    "payload": {"sessionId": "s", "turnId": "t", "offset": 0, "afterStep": 0}}
            ws.send(json.dumps(read))
            first = json.loads(ws.recv())
            assert first["_tag"] == "Chunk", first
            while "first" not in json.dumps(first):  # read (and ack) up to the short part
                ws.send('{"_tag":"Ack","requestId":"r"}')
                first = json.loads(ws.recv())
            ws.send('{"_tag":"Ack","requestId":"r"}')  # then the host reads no more
            driver.go.set()
            assert driver.done.wait(SEND_TIMEOUT * 0.6)
            time.sleep(0.2)  # the wide part is committed and sent (or handed to the stream's thread)
            # Another turn's start must commit meanwhile: the store's writer is not held.
            answered = threading.Event()

            def other() -> None:
                manager.open_session("s2", None)
                manager.start_turn("s2", "t2", "p")
                answered.set()

            threading.Thread(target=other, daemon=True).start()
            assert answered.wait(SEND_TIMEOUT * 0.5), \
                "the store's commits waited on a host that stopped reading"
        finally:
            ws.sock.close()

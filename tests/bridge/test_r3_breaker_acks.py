"""Attacks on the ack-bounded send at once (issue 15, third round): a host that sends Acks
but does not read must not make a committing thread wait on its socket. Real sockets, a
real bridge server in this process, a websocket-client host."""
from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any

import pytest
import websocket

from bridge_client.bridge.driver import TurnContext
from bridge_client.bridge.server import BridgeServer, IdleWatcher
from bridge_client.bridge.store import Store
from bridge_client.bridge.turns import TurnManager
from bridge_client.redacted import Redacted

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
    store = Store(str(tmp_path / "bridge.sqlite3"))
    driver = _BigDriver()
    manager = TurnManager(store, driver, agent_id="echo", bridge_id="b" * 32)
    server = BridgeServer(
        manager, token=Redacted("tok"), hello={}, idle=IdleWatcher(60, lambda: None),
        send_timeout=SEND_TIMEOUT,
    )
    port = server.start()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield manager, port, driver
    finally:
        server.shutdown()
        thread.join(5)
        manager.close()
        store.close()


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

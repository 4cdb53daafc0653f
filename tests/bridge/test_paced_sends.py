"""A paced stream's Chunks, sent at once by the thread that committed or acked: the
bridge asks the kernel what waits in the socket only when the frames the host has not acked
could fill the bound of a send at once, over real sockets, with a real websocket-client host."""
from __future__ import annotations

import json

import pytest
import websocket

from bridge_client.bridge import connection as bridge_connection
from bridge_client.drivers import echo
from inproc_server import serving

pytestmark = pytest.mark.timeout(60)

PARTS = 120


@pytest.fixture
def bridge(tmp_path):
    # One part every 2 ms: a paced stream, each delta committed and sent on its own.
    with serving(str(tmp_path / "bridge.sqlite3"), echo.EchoDriver(delay=0.002, chunks=PARTS)) as served:
        yield served


def _read_turn(port: int, session: str, turn: str, ack: bool = True) -> list:
    """ReadTurn from the start over a plain websocket-client connection; every Chunk acked
    (``ack``); returns the values, in order, up to the Exit."""
    ws = websocket.create_connection(
        f"ws://127.0.0.1:{port}/", header=["Authorization: Bearer tok"], timeout=20
    )
    try:
        payload = {"sessionId": session, "turnId": turn, "offset": 0, "afterStep": 0}
        request = {"_tag": "Request", "id": "1", "tag": "ReadTurn", "payload": payload, "headers": []}
        ws.send(json.dumps(request))
        values = []
        while True:
            message = json.loads(ws.recv())
            if message["_tag"] == "Chunk":
                values.extend(message["values"])
                if ack:
                    ws.send('{"_tag":"Ack","requestId":"1"}')
            elif message["_tag"] == "Exit":
                assert message["exit"]["_tag"] == "Success", message
                return values
    finally:
        ws.close()


def _count_room(monkeypatch) -> list:
    calls: list = []
    queued = bridge_connection._queued

    def counted(fd: int) -> object:
        calls.append(fd)
        return queued(fd)

    monkeypatch.setattr(bridge_connection, "_queued", counted)
    return calls


def test_a_paced_stream_acked_by_its_host_is_sent_without_asking_the_socket(bridge, monkeypatch):
    manager, port = bridge
    calls = _count_room(monkeypatch)
    manager.open_session("s", None)
    manager.start_turn("s", "t", " ".join(f"w{i}" for i in range(PARTS)))
    values = _read_turn(port, "s", "t")
    deltas = [v for v in values if v["type"] == "text-delta"]
    assert len(deltas) == PARTS and [v["index"] for v in values] == list(range(len(values)))
    assert values[-1]["type"] == "turn-finish"
    assert calls == []  # the frames sent in all could not fill the socket's bound


def test_frames_the_host_has_not_acked_make_the_bridge_ask_the_socket(bridge, monkeypatch):
    # With the bound of a send at once lowered below what the unacked frames (and websockets'
    # own) may hold, every send at once first asks the kernel, as before the count existed.
    manager, port = bridge
    calls = _count_room(monkeypatch)
    monkeypatch.setattr(bridge_connection, "_UNREAD_SLACK", bridge_connection.INLINE_BYTES)
    manager.open_session("s", None)
    manager.start_turn("s", "t", " ".join(f"w{i}" for i in range(PARTS)))
    values = _read_turn(port, "s", "t")
    assert len([v for v in values if v["type"] == "text-delta"]) == PARTS
    assert calls, "the sends at once should have asked the socket"

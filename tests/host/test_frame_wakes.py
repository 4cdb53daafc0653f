"""The reader's handling of a frame of several messages: our bridge
answers a turn's StartTurn and ReadTurn in one frame (StartTurn's Exit, the stream's Chunk,
often the stream's Exit). The reader routes the whole frame, then wakes the caller once, then
sends the Acks, and sends none for a stream whose Exit came in the same frame.

A real bridge process (echo driver) and real sockets; the host's conditions and sends are
watched in this process.
"""
from __future__ import annotations

import threading
from typing import Any, List, Tuple

import pytest

import bridge_client as bc
from bridge_client.client import connection as client_connection
from bridge_client.client.connection import Connection
from bridge_client.client.stream import Pending
from bridge_client.wire import frames
from host_support import options, session_options

pytestmark = pytest.mark.timeout(60)


def _connected(session: bc.Session) -> Connection:
    session._connect()
    conn = session._conn
    assert conn is not None
    return conn


def test_the_caller_is_woken_once_per_frame_with_the_whole_frame_in(sandbox, monkeypatch):
    # Each wake records what the connection's requests hold at that moment.
    wakes: List[List[Tuple[str, int, bool]]] = []
    holder: List[Connection] = []

    class Recording(threading.Condition):
        def _record(self) -> None:
            if not holder:
                return  # connecting (Hello, OpenSession)
            conn = holder[0]
            wakes.append([(p.id, len(p.values), p.outcome is not None) for p in conn._pending.values()])

        def notify(self, n: int = 1) -> None:
            self._record()
            super().notify(n)

        def notify_all(self) -> None:
            self._record()
            super().notify_all()

    def pending(request_id: str, stream: bool, cond: Any = None) -> Pending:
        if cond is not None:  # a request sharing another's condition
            return Pending(request_id, stream, cond)
        made = Pending(request_id, stream)
        made.cond = Recording(threading.Lock())
        return made

    monkeypatch.setattr(client_connection, "Pending", pending)
    # A delay before each part: the stream goes on after the answer's frame (no Exit in it).
    slow = options("echo", agent_options={"delay": 0.05})
    with bc.create_session(slow, session_options(sandbox)) as session:
        holder.append(_connected(session))
        del wakes[:]
        turn = session.turn("one two", turn_id="t-wake")
        first = wakes[0]
        parts = list(turn)
    start_id, read_id = first[0][0], first[1][0]
    assert int(read_id) == int(start_id) + 1
    # The first wake came with StartTurn's answer and the stream's first values both in.
    assert first[0][2], "StartTurn's answer is in"
    assert first[1][1] >= 1, "the stream's first Chunk was routed before the wake"
    assert [p.index for p in parts] == list(range(len(parts)))
    assert turn.text() == "one two"


def test_no_ack_for_a_stream_whose_exit_came_in_the_same_frame(sandbox, monkeypatch):
    with bc.create_session(options("echo"), session_options(sandbox)) as session:
        conn = _connected(session)
        acked: List[str] = []
        ended_with_chunk: List[str] = []
        send, parse = conn._send_quietly, frames.parse_frame

        def send_(message: Any) -> None:
            if isinstance(message, frames.Ack):
                acked.append(str(message.request_id))
            send(message)

        def parse_(data: Any) -> List[Any]:
            objects = parse(data)
            chunks = {o.get("requestId") for o in objects if o.get("_tag") == "Chunk"}
            ended_with_chunk.extend(
                o["requestId"] for o in objects if o.get("_tag") == "Exit" and o.get("requestId") in chunks
            )
            return objects

        monkeypatch.setattr(conn, "_send_quietly", send_)
        monkeypatch.setattr(frames, "parse_frame", parse_)
        texts = ["".join(p.text for p in session.turn(f"turn {i}") if isinstance(p, bc.TextDelta))
                 for i in range(5)]
        assert session._conn is conn
    assert texts == [f"turn {i}" for i in range(5)]
    assert ended_with_chunk, "our bridge ends a short turn's stream in the answer's frame"
    assert not set(acked) & set(ended_with_chunk), "an Ack for a stream that had ended"

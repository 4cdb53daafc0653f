"""C09: the host sends a turn's ``StartTurn`` and ``ReadTurn`` in one frame (a JSON array of
the two), and our bridge answers the pair in one batch frame: StartTurn's Exit first, then
the stream's first Chunk. A failed StartTurn, an interrupt in the middle of the pair's send
and a drop right after it each leave nothing open, and the turn is read whole, once.

A real bridge process (echo driver) and real sockets; the host's frames are watched in this
process (what ``Connection._transmit`` writes, what the reader parses).
"""
from __future__ import annotations

import json
import socket
from typing import Any, List

import pytest
import websocket

import bridge_client as bc
from bridge_client.client.connection import Connection
from bridge_client.wire import frames
from host_support import options, session_options

pytestmark = pytest.mark.timeout(60)


def _texts(turn: bc.Turn) -> List[str]:
    return [p.text for p in turn if isinstance(p, bc.TextDelta)]


def _watch(monkeypatch: pytest.MonkeyPatch, conn: Connection) -> List[Any]:
    """Record, in order, ``("sent", objects)`` for each frame ``conn`` writes and
    ``("got", objects)`` for each frame its reader parses."""
    seen: List[Any] = []
    transmit, parse = conn._transmit, frames.parse_frame

    def transmit_(data: bytes) -> None:
        seen.append(("sent", parse(data)))
        transmit(data)

    def parse_(data: Any) -> List[Any]:
        objects = parse(data)
        seen.append(("got", objects))
        return objects

    monkeypatch.setattr(conn, "_transmit", transmit_)
    monkeypatch.setattr(frames, "parse_frame", parse_)
    return seen


def _connected(session: bc.Session) -> Connection:
    session._connect()
    conn = session._conn
    assert conn is not None
    return conn


def _open_requests(conn: Connection) -> List[str]:
    with conn._lock:
        return [p.id for p in conn._pending.values() if p.outcome is None]


def test_c09_start_turn_and_read_turn_go_in_one_frame_and_are_answered_in_one_batch(sandbox, monkeypatch):
    with bc.create_session(options("echo"), session_options(sandbox)) as session:
        seen = _watch(monkeypatch, _connected(session))
        turn = session.turn("one two", turn_id="t-pair")
        parts = list(turn)
    sent = [objects for what, objects in seen if what == "sent"]
    pair = sent[0]
    assert [m["tag"] for m in pair] == ["StartTurn", "ReadTurn"], "both requests in one frame"
    assert pair[0]["payload"]["turnId"] == pair[1]["payload"]["turnId"] == "t-pair"
    assert (pair[1]["payload"]["offset"], pair[1]["payload"]["afterStep"]) == (0, 0)
    answer = next(objects for what, objects in seen if what == "got")
    assert answer[0]["_tag"] == "Exit" and answer[0]["requestId"] == pair[0]["id"]
    assert answer[0]["exit"]["value"]["status"] == "started"
    assert answer[1]["_tag"] == "Chunk" and answer[1]["requestId"] == pair[1]["id"]
    assert answer[1]["values"][0]["type"] == "turn-start"
    assert [p.index for p in parts] == list(range(len(parts)))
    assert turn.text() == "one two" and turn.status == "started"


def test_c09_a_pair_whose_start_turn_fails_yields_nothing_and_leaves_nothing_open(sandbox, monkeypatch):
    # The same turn id with another prompt: StartTurn fails (TurnConflict) while the ReadTurn
    # beside it reads the other prompt's turn; none of those parts is yielded, and the stream
    # is closed.
    with bc.create_session(options("echo"), session_options(sandbox)) as session:
        assert _texts(session.turn("a b", turn_id="t-taken")) == ["a ", "b"]
        conn = _connected(session)
        seen = _watch(monkeypatch, conn)
        with pytest.raises(bc.TurnConflict):
            session.turn("c d", turn_id="t-taken")
        assert [m["tag"] for m in seen[0][1]] == ["StartTurn", "ReadTurn"]
        assert _open_requests(conn) == []
        assert session._conn is conn and not conn.closed
        assert _texts(session.turn("e f")) == ["e ", "f"]


def test_c09_an_interrupt_in_the_middle_of_the_pair_leaves_no_orphan_and_the_turn_reads_once(
    sandbox, monkeypatch
):
    # Half the pair's frame is on the wire when KeyboardInterrupt comes: the connection is
    # closed at once (its next bytes would be read as the frame's rest), no request or stream
    # stays open, and the same turn, started again, is read whole, once.
    with bc.create_session(options("echo"), session_options(sandbox)) as session:
        conn = _connected(session)
        real = conn._ws.send

        def half_then_interrupt(data: Any, opcode: int = websocket.ABNF.OPCODE_TEXT) -> Any:
            if isinstance(data, bytes) and data.startswith(b"["):
                raw = websocket.ABNF.create_frame(data, opcode).format()
                conn._ws.sock.sendall(raw[: len(raw) // 2])
                raise KeyboardInterrupt
            return real(data, opcode)

        monkeypatch.setattr(conn._ws, "send", half_then_interrupt)
        with pytest.raises(KeyboardInterrupt):
            session.turn("x y z", turn_id="t-cut")
        assert conn.closed and _open_requests(conn) == [] and not conn._pending
        assert session._channel.active_turn is None
        turn = session.turn("x y z", turn_id="t-cut")
        parts = list(turn)
        assert session._conn is not conn
    assert [p.index for p in parts] == list(range(len(parts)))
    assert sum(isinstance(p, bc.TurnStart) for p in parts) == 1
    assert turn.text() == "x y z"


def test_c08_c09_a_drop_right_after_the_pair_sends_it_again_and_reads_the_turn_once(sandbox, monkeypatch):
    # The pair is written whole, then the connection drops before any answer: the host sends
    # the pair again over a new connection (StartTurn is idempotent: the bridge may have started
    # the turn already) and reads every part once.
    with bc.create_session(options("echo"), session_options(sandbox)) as session:
        conn = _connected(session)
        real = conn._ws.send

        def send_then_drop(data: Any, opcode: int = websocket.ABNF.OPCODE_TEXT) -> Any:
            sent = real(data, opcode)
            if isinstance(data, bytes) and data.startswith(b"["):
                conn._ws.sock.shutdown(socket.SHUT_RDWR)
            return sent

        monkeypatch.setattr(conn._ws, "send", send_then_drop)
        turn = session.turn("p q", turn_id="t-drop")
        parts = list(turn)
        assert session._conn is not conn and conn.closed
        assert turn.status in ("started", "running", "finished")
        assert _open_requests(session._conn) == []
    assert [p.index for p in parts] == list(range(len(parts)))
    assert sum(isinstance(p, bc.TurnStart) for p in parts) == 1
    assert turn.text() == "p q"
    assert json.loads(json.dumps(parts[0].turn.to_dict()))["turnId"] == "t-drop"

"""The host connection's life as one table (STYLE.md rule 2): every state has its moves, an
illegal move raises and changes nothing, and a real connection walks the table."""
from __future__ import annotations

import socket
import threading

import pytest
from upgrade_peer import accept_value, read_upgrade_request

from bridge_client.client.connection import Connection
from bridge_client.client.connection_life import MOVES, STOPPED, ConnectionLife, Event, IllegalMove, State
from bridge_client.redacted import Redacted
from bridge_client.sandbox.base import Endpoint


def test_connection_life_table_covers_every_state_and_closed_is_final():
    assert set(MOVES) == set(State)
    assert all(new is State.CLOSED for new in MOVES[State.CLOSED].values())
    # Closing again changes nothing, from every state close() may meet twice.
    assert MOVES[State.CLOSING][Event.CLOSE] is State.CLOSING
    assert MOVES[State.CLOSED][Event.CLOSE] is State.CLOSED
    # A forked child's copy ends closed, whatever the parent's state.
    assert all(MOVES[s][Event.FORKED] is State.CLOSED for s in State)
    assert STOPPED == {State.BROKEN, State.CLOSING, State.CLOSED}


@pytest.mark.parametrize("state", [s for s in State if s is not State.CONNECTING])
def test_connection_life_illegal_move_raises_and_leaves_the_state(state):
    life = ConnectionLife()
    life.state = state
    with pytest.raises(IllegalMove, match="cannot go from"):
        life.move(Event.OPENED)  # opened only once, from connecting
    assert life.state is state


def test_connection_life_walks_open_broken_closing_closed():
    life = ConnectionLife()
    assert life.move(Event.OPENED) is State.CONNECTING and not life.stopped
    assert life.move(Event.CUT_SHORT) is State.OPEN and life.stopped
    assert life.move(Event.CLOSE) is State.BROKEN  # close() sees BROKEN: no close frame
    assert life.state is State.CLOSING
    assert life.move(Event.ENDED) is State.CLOSING and life.state is State.CLOSED


def test_connection_life_of_a_real_connection_open_then_closed_by_a_dropped_peer():
    # A tiny WebSocket server that accepts the upgrade and then drops the socket: the reader
    # ends by itself (OPEN -ended-> CLOSED), and close() afterwards changes nothing.
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    go_on = threading.Event()

    def serve() -> None:
        sock, _ = listener.accept()
        with sock:
            accept = accept_value(read_upgrade_request(sock))
            sock.sendall(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n"
            )
            go_on.wait(10)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        conn = Connection(
            Endpoint(url=f"ws://127.0.0.1:{port}/", headers=()),
            Redacted("t" * 32),
            open_timeout=5.0,
            ping_interval=5.0,
            ping_timeout=5.0,
        )
        assert conn._life.state is State.OPEN and not conn.closed
        go_on.set()  # the server drops the socket
        assert conn._reader is not None
        conn._reader.join(10)
        assert conn._life.state is State.CLOSED and conn.closed
        conn.close()  # idempotent: CLOSED -close-> CLOSED
        assert conn._life.state is State.CLOSED
    finally:
        go_on.set()
        server.join(10)
        listener.close()

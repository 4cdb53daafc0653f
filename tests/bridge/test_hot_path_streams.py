"""A ReadTurn stream (the server's ``_ReadStream``) stopped while another thread sends its
Chunk: the thread that holds the stream must end it (Exit Failure[Interrupt], forgotten by its
connection), whatever thread that is (streams without a thread of their own)."""
from __future__ import annotations

import threading

import pytest

from bridge_client.bridge.server import _ReadStream
from bridge_client.wire.frames import Failure

pytestmark = pytest.mark.timeout(60)


class _Conn:
    """What a stream needs of its connection; ``send`` waits on ``release`` once ``hold`` is set."""

    number = 1

    def __init__(self) -> None:
        self.hold = False
        self.sending = threading.Event()
        self.release = threading.Event()
        self.exits = []
        self.forgotten = []
        self.sent = 0

    def try_send(self, text, stream=None):
        return None if self.hold else self.send(text)

    def send(self, text, stream=None):
        if self.hold:
            self.sending.set()
            assert self.release.wait(10)
        self.sent += 1
        return True

    def forget(self, stream):
        self.forgotten.append(stream)

    def send_exit(self, request_id, value):
        self.exits.append((request_id, value))

    def send_die(self, request_id, message):  # pragma: no cover - a bug
        self.exits.append((request_id, message))


@pytest.mark.parametrize("who", ["ack", "poke"])
def test_b04_a_stop_during_a_send_in_another_thread_ends_the_stream(long_turn, who):
    turn = long_turn  # complete: more than one Chunk of parts
    conn = _Conn()
    stream = _ReadStream(conn, "r", turn, 0, 0)  # type: ignore[arg-type]
    stream.start()  # the first Chunk, sent at once
    assert conn.sent == 1 and not conn.exits
    conn.hold = True
    # The next Chunk: the thread that read the Ack (or that committed parts) cannot send it
    # at once, so the stream's own thread sends it, and waits on the socket.
    if who == "ack":
        stream.ack()
    else:
        stream._inflight = False  # as after the Ack, its next send left to a poke
        stream.poke()
    assert conn.sending.wait(10)
    stream.stop("interrupt")  # the connection's thread, meanwhile (Interrupt)
    conn.release.set()
    stream.join(5)
    for _ in range(100):
        if conn.exits:
            break
        threading.Event().wait(0.05)
    assert len(conn.exits) == 1, "the stopped stream was never ended"
    request_id, value = conn.exits[0]
    assert request_id == "r" and isinstance(value, Failure)
    assert conn.forgotten == [stream]
    assert stream not in turn.readers

"""A ReadTurn stream's last frame (Exit Success after ``turn-finish``, Exit Failure[Interrupt])
from a thread that must not wait on the peer (the committing thread, the one that read an Ack):
sent only at once, else by the stream's own thread, after the Chunk it follows. The wait on a
real socket is tests/bridge/test_small_send_buffer_peers.py; this is every way to the Exit."""
from __future__ import annotations

import threading
from typing import Any, List, Tuple

import pytest

from bridge_client.bridge.read_stream import ReadStream
from bridge_client.wire.frames import Failure, Interrupted, Success

pytestmark = pytest.mark.timeout(60)


class _Conn:
    """A connection whose socket takes Chunks at once and never an Exit at once (as when a
    pong to a peer that stopped reading holds the WebSocket's lock)."""

    number = 1

    def __init__(self) -> None:
        self.log: List[Tuple[str, str, Any]] = []  # (what, thread name, value)
        self.on_chunk: Any = None
        self.exited = threading.Event()

    def try_send(self, text: str) -> Any:
        return self.send(text)

    def send(self, text: str) -> bool:
        self.log.append(("chunk", threading.current_thread().name, '"turn-finish"' in text))
        if self.on_chunk is not None:
            self.on_chunk()
        return True

    def forget(self, stream: Any) -> None:
        pass

    def try_send_exit(self, request_id: Any, value: Any) -> Any:
        return None

    def send_exit(self, request_id: Any, value: Any) -> None:
        self.log.append(("exit", threading.current_thread().name, value))
        self.exited.set()


def _in_thread(name: str, fn: Any) -> None:
    thread = threading.Thread(target=fn, name=name)
    thread.start()
    thread.join(10)


@pytest.mark.parametrize("ending", ["turn-finish", "interrupt"])
def test_b09_the_last_frame_from_a_thread_that_must_not_wait_goes_to_the_streams_thread(long_turn, ending):
    turn = long_turn
    conn = _Conn()
    stream = ReadStream(conn, "r", turn, 0, 0)  # type: ignore[arg-type]
    stream.start()  # the first Chunk, from the connection's thread (this one)
    assert [w for w, _, _ in conn.log] == ["chunk"]
    if ending == "interrupt":  # the Interrupt comes while the committing thread sends a Chunk
        conn.on_chunk = lambda: _in_thread("connection", lambda: stream.stop("interrupt"))
    # The next Chunks go from a committing thread, after the host's Ack (read by the same
    # sort of thread): at once; the Exit cannot go at once.
    for _ in range(10):  # one Ack per Chunk, until the end
        _in_thread("committing", stream.ack)
        if conn.exited.wait(0.5):
            break
    assert conn.exited.is_set(), "no Exit"
    stream.join(5)
    whats = [w for w, _, _ in conn.log]
    assert whats[-1] == "exit" and whats.count("exit") == 1, whats
    _, thread, value = conn.log[-1]
    assert thread.startswith("bridge-read-"), f"the Exit was sent by {thread}"
    if ending == "interrupt":
        assert isinstance(value, Failure) and isinstance(value.cause[0], Interrupted), value
    else:
        assert value == Success(None)
        assert conn.log[-2][2] is True  # right behind the turn-finish Chunk
        assert all(name == "committing" for w, name, _ in conn.log[1:-1])
    assert stream not in turn.readers

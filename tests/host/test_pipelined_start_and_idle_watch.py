"""The host's pipelined requests (StartTurn and ReadTurn sent
together, the one idle watcher), each pinned by a test against a real bridge."""
from __future__ import annotations

import threading
from typing import Any

import pytest

import bridge_client as bc
import bridge_client.client.stream as stream_mod
from host_support import options, session_options, wait_until

pytestmark = pytest.mark.timeout(90)


def _open_streams(session: bc.Session) -> int:
    conn = session._channel.conn
    if conn is None:
        return 0
    with conn._lock:
        return sum(1 for p in conn._pending.values() if p.stream)


def test_c09_c16_an_interrupt_in_turn_leaves_no_stream_of_the_turn_open(sandbox, monkeypatch):
    # Ctrl-C while session.turn() waits for turn-start on the stream sent right behind
    # StartTurn: the caller never gets the Turn, so nothing could ever take from or close that
    # stream; it must be closed (Interrupt sent) before turn() raises, not left open (and
    # buffering the turn's parts on this connection) until the turn ends in its bridge.
    agent = {"steps": 3, "chunks": 20, "delay": 0.2}  # runs ~12 s: long after the checks below
    with bc.create_session(options("echo", agent_options=agent), session_options(sandbox)) as session:
        first = session.turn("warm up")
        assert first.id
        session.suspend_turn()
        assert wait_until(lambda: _open_streams(session) == 0, timeout=3.0)
        real_take = stream_mod.Stream.take
        armed = [True]

        def interrupted_take(self: Any, timeout: Any = None) -> Any:
            if armed[0]:
                armed[0] = False
                raise KeyboardInterrupt
            return real_take(self, timeout)

        monkeypatch.setattr(stream_mod.Stream, "take", interrupted_take)
        with pytest.raises(KeyboardInterrupt):
            session.turn("abcdefghij")
        monkeypatch.setattr(stream_mod.Stream, "take", real_take)
        assert wait_until(lambda: _open_streams(session) == 0, timeout=3.0), (
            f"{_open_streams(session)} stream(s) left open by the interrupted turn()"
        )
        # The session goes on: a new turn reads whole.
        turn = session.turn("next")
        session.cancel_turn()
        parts = list(turn)
        assert isinstance(parts[-1], bc.TurnFinish)


def test_c06_a_connection_made_while_the_last_one_is_dropped_still_closes_when_idle(sandbox, monkeypatch):
    # Thread A drops the connection (the idle watch of the channel is stopped) while thread B
    # connects again (and watches the new connection): A's forget must not take B's watch
    # with it, or the new connection is never closed when idle (nor its bridge left to exit).
    from bridge_client.client import idle_watch

    with bc.create_session(options("echo"), session_options(sandbox, idle_timeout=0.3)) as session:
        list(session.turn("hi"))
        channel = session._channel
        real_forget = idle_watch.WATCH.forget
        raced = []

        def connect_then_forget(item: Any) -> None:
            if item is channel and not raced:
                raced.append(True)
                other = threading.Thread(target=channel.connect)  # B, between A's two steps
                other.start()
                other.join(20)
            real_forget(item)

        monkeypatch.setattr(idle_watch.WATCH, "forget", connect_then_forget)
        channel.drop()
        monkeypatch.setattr(idle_watch.WATCH, "forget", real_forget)
        assert raced and channel.conn is not None, "B connected again"
        assert wait_until(lambda: channel.conn is None, timeout=5.0), "the new connection never closed idle"


@pytest.mark.parametrize("read_first", [False, True])
def test_c09_a_cancel_right_after_turn_ends_the_turn_cancelled_and_read_whole(sandbox, read_first):
    agent = {"steps": 3, "chunks": 20, "delay": 0.05}
    with bc.create_session(options("echo", agent_options=agent), session_options(sandbox)) as session:
        for n in range(3):
            turn = session.turn("a b c d", turn_id=f"c{n}")
            parts = [next(turn)] if read_first else []
            session.cancel_turn()
            parts += list(turn)
            assert isinstance(parts[0], bc.TurnStart) and isinstance(parts[-1], bc.TurnFinish)
            assert parts[-1].finish_reason == "cancelled"
            assert [p.index for p in parts] == list(range(len(parts)))
            assert _open_streams(session) == 0


def test_b09_c09_many_turns_interrupted_in_turn_leave_the_connections_streams_free(sandbox, monkeypatch):
    # 40 turns (over the bridge's 32 streams per connection) each interrupted in turn() at
    # the first take, all still running in the bridge: none keeps a stream slot, so the next
    # turn's read is served at once (not Overloaded until the resend window runs out).
    agent = {"steps": 1, "chunks": 10, "delay": 1.0}  # each runs ~10 s
    with bc.create_session(
        options("echo", agent_options=agent), session_options(sandbox, resend_window=2.0)
    ) as session:
        real_take = stream_mod.Stream.take

        def interrupted_take(self: Any, timeout: Any = None) -> Any:
            raise KeyboardInterrupt

        monkeypatch.setattr(stream_mod.Stream, "take", interrupted_take)
        for n in range(40):
            with pytest.raises(KeyboardInterrupt):
                session.turn("x", turn_id=f"i{n}")
        monkeypatch.setattr(stream_mod.Stream, "take", real_take)
        turn = session.turn("y", turn_id="last")
        session.cancel_turn()
        parts = list(turn)
        assert isinstance(parts[-1], bc.TurnFinish) and parts[-1].finish_reason == "cancelled"

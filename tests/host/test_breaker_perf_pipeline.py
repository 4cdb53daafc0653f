"""The perf breaker's findings against issue 15's host changes (StartTurn and ReadTurn sent
together, the one idle watcher), each pinned by a test against a real bridge."""
from __future__ import annotations

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

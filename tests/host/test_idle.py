"""Connections close when unused and reopen on use; bridges exit when unused (C06, C07, B06)."""
from __future__ import annotations

import os

import pytest

import bridge_client as bc
from bridge_client.state_dir import identity
from host_support import options, session_options, wait_until

pytestmark = pytest.mark.timeout(60)


def test_c06_c07_idle_connection_closes_and_next_turn_reconnects(sandbox):
    with bc.create_session(options("echo"), session_options(sandbox, idle_timeout=0.3)) as session:
        assert not session.connected, "the session connects lazily"
        list(session.turn("first"))
        assert session.connected
        assert wait_until(lambda: not session.connected, timeout=5), "idle connection was not closed"
        # The idle thread forgets the connection first, then closes it (joining its reader):
        # it ends a moment after the session stops being connected.
        threading = __import__("threading")
        assert wait_until(
            lambda: not [t for t in threading.enumerate() if t.name.startswith("bridge-client-idle")],
            timeout=5,
        )
        parts = list(session.turn("second"))
        assert parts[-1].finish_reason == "stop"
        assert session.state.data == {"turns": 2}


def test_c06_a_turn_being_read_is_use(sandbox):
    opts = options("echo", agent_options={"steps": 6, "delay": 0.1})
    with bc.create_session(opts, session_options(sandbox, idle_timeout=0.2)) as session:
        turn = session.turn("slow")
        connections = set()
        for part in turn:  # noqa: B007 (the last part is checked below)
            connections.add(id(session._conn))
        assert part.type == "turn-finish"
        assert len(connections) == 1, "the connection stayed open while the turn was read"


def test_b06_bridge_exits_when_idle_and_c07_a_new_one_restores_the_session(sandbox):
    opts = options("echo", bridge_idle_timeout=0.5)
    with bc.create_session(opts, session_options(sandbox, idle_timeout=0.2)) as session:
        list(session.turn("before"))
        pid = session._hello.pid
        listening = os.path.join(
            identity.state_dir(sandbox.state_root, session.bridge_id), identity.LISTENING_FILE
        )
        assert os.path.exists(listening)
        assert wait_until(lambda: not os.path.exists(listening), timeout=10), "bridge did not exit when idle"
        assert wait_until(
            lambda: not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z",
            timeout=5,
        )
        list(session.turn("after"))
        assert session._hello.pid != pid
        assert session.state.data == {"turns": 2}


def test_c06_reading_a_turn_does_not_wake_the_idle_timer_per_batch(sandbox):
    # The idle timer waits for its deadline while the connection is not busy: the end of each
    # read (one per batch of parts) must not wake it; it still closes an idle connection.
    opts = options("echo", agent_options={"steps": 1, "chunks": 400, "delay": 0.001})
    with bc.create_session(opts, session_options(sandbox, idle_timeout=30.0)) as session:
        list(session.turn("warm"))
        channel = session._channel
        wakes = []
        real = channel.cond.notify_all

        def counted() -> None:
            wakes.append(1)
            real()

        channel.cond.notify_all = counted
        fills = 0
        turn = session.turn("x" * 400)
        real_fill = turn._fill

        def counted_fill() -> None:
            nonlocal fills
            fills += 1
            real_fill()

        turn._fill = counted_fill
        assert len(list(turn)) > 400
        assert fills > 20, "the parts came in a few batches only: nothing was measured"
        assert len(wakes) <= 2, f"{len(wakes)} wakes of the idle timer for {fills} reads"
    with bc.create_session(options("echo"), session_options(sandbox, idle_timeout=0.3)) as session:
        list(session.turn("first"))
        assert wait_until(lambda: not session.connected, timeout=5), "idle connection was not closed"

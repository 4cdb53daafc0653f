"""Checks of per-part path and Chunk bounds against a real
bridge: a part over a Chunk's byte bound among thousands of small ones, read through a
KeyboardInterrupt at any bytecode of the read (the pipelined StartTurn/ReadTurn included),
yields every part once and ``Turn.text()`` exactly."""
from __future__ import annotations

import collections
import sys

import pytest

import bridge_client as bc
from host_support import options, session_options, wait_until
from test_resilience_host_read_loop import READ_FILES, _InterruptAtBytecodes, _read_through_interrupts

pytestmark = pytest.mark.timeout(120)

# One word of 300,000 characters (one text delta: over a Chunk's byte bound), then
# 1,500 one-word deltas: the Chunks around the big part are cut by the byte bound.
PROMPT = "W" * 300_000 + " " + "ab " * 1_500


@pytest.mark.skipif(sys.version_info < (3, 11), reason="the delivery points are those of CPython 3.11+")
@pytest.mark.parametrize("seed", [7, 8])
def test_c09_b04_a_part_over_a_chunks_bytes_read_through_interrupts_is_yielded_once_exactly(
    sandbox, seed
):
    steps = 2
    bridge = options("echo", agent_options={"steps": steps})
    with bc.create_session(bridge, session_options(sandbox)) as session:
        tracer = _InterruptAtBytecodes(seed, READ_FILES)
        turn = None
        in_turn = 0
        sys.settrace(tracer)
        try:
            for _ in range(10_000):  # turn() itself is interrupted too: each call a new turn
                try:
                    turn = session.turn(PROMPT, turn_id=f"big-{seed}")
                    break
                except KeyboardInterrupt:
                    in_turn += 1
                    sys.settrace(tracer)
            assert turn is not None
            parts = [next(iter(turn))]
            parts += _read_through_interrupts(turn, after=lambda: sys.settrace(tracer))
        finally:
            sys.settrace(None)
        assert in_turn > 0, "no interrupt landed in turn() (StartTurn and ReadTurn)"
        assert tracer.raised > 20, f"the interrupts did not land in the read ({tracer.raised})"
        indexes = [p.index for p in parts]
        repeated = [i for i, n in collections.Counter(indexes).items() if n > 1]
        assert not repeated, f"parts delivered twice: {repeated[:10]}"
        assert indexes == list(range(len(parts))), "parts lost or out of order"
        assert isinstance(parts[-1], bc.TurnFinish) and turn.done and turn.steps == steps
        assert turn.text() == PROMPT * steps
        conn = session._channel.conn
        if conn is not None:  # the interrupted turn() calls left no stream open
            assert wait_until(lambda: not [p for p in conn._pending.values() if p.stream], timeout=3.0)
        deltas = [p for p in parts if isinstance(p, bc.TextDelta)]
        assert max(len(p.text) for p in deltas) > 300_000


KILL_PROMPT = "one two three four five six seven eight "


@pytest.mark.parametrize("delays", [(0.0, 0.004, 0.012), (0.002, 0.008, 0.03)])
def test_c09_c13_sigkill_while_start_turn_and_read_turn_are_in_flight_yields_each_part_once(sandbox, delays):
    # The bridge is SIGKILLed from another thread a few ms after session.turn() sends
    # StartTurn and ReadTurn together: before either is served, between StartTurn's answer
    # and the first Chunk, or among the first parts. turn() resumes on the restarted bridge
    # (no error), and the read yields every part once, the text exactly.
    import threading

    from resilience_support import check_turn, echo_text, sigkill_bridge

    steps = 2
    bridge = options("echo", agent_options={"steps": steps, "chunks": 8, "delay": 0.01})
    with bc.create_session(bridge, session_options(sandbox)) as session:
        list(session.turn("warm"))  # the bridge runs and the connection is open
        for n, delay in enumerate(delays):
            timer = threading.Timer(delay, lambda: sigkill_bridge(sandbox, session.bridge_id))
            timer.start()
            try:
                turn = session.turn(KILL_PROMPT, turn_id=f"k{n}")
                parts = list(turn)
            finally:
                timer.join(15)
            check_turn(parts, steps=steps)
            assert turn.text() == echo_text(KILL_PROMPT, steps), f"delay {delay}"


@pytest.mark.skipif(sys.version_info < (3, 11), reason="the delivery points are those of CPython 3.11+")
@pytest.mark.parametrize("seed, kill_at", [(3, 6), (4, 17)])
def test_c09_c13_interrupts_at_any_bytecode_across_a_bridge_restart_mid_step_stay_exact(
    sandbox, seed, kill_at
):
    # Ctrl-C anywhere in the read while the turn's bridge is SIGKILLed mid-step: the host
    # reads the step-reset and the step's new attempt after the restart, each part once, and
    # text() is the undisturbed text (the discarded attempt's deltas are not in it).
    from resilience_support import check_turn, echo_text, sigkill_bridge

    steps = 2
    bridge = options("echo", agent_options={"steps": steps, "chunks": 8, "delay": 0.03})
    with bc.create_session(bridge, session_options(sandbox)) as session:
        tracer = _InterruptAtBytecodes(seed, READ_FILES)
        killed = []
        parts: list = []
        turn = None
        sys.settrace(tracer)
        try:
            for _ in range(10_000):
                try:
                    turn = session.turn(KILL_PROMPT, turn_id=f"r{seed}")
                    break
                except KeyboardInterrupt:
                    sys.settrace(tracer)
            assert turn is not None
            for _ in range(100_000):
                try:
                    for part in turn:
                        parts.append(part)
                        if not killed and part.index >= kill_at:
                            killed.append(sigkill_bridge(sandbox, session.bridge_id))
                    break
                except KeyboardInterrupt:
                    sys.settrace(tracer)
        finally:
            sys.settrace(None)
        assert killed and tracer.raised > 20
        check_turn(parts, steps=steps)
        assert any(isinstance(p, bc.StepReset) for p in parts), "the kill landed mid-step"
        assert turn.text() == echo_text(KILL_PROMPT, steps)

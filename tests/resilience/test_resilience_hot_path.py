"""Drops at random moments of hot path: while the first Chunk of a ReadTurn goes
out from the connection's thread, and while a fast stream sends from the committing or its
own thread; every part is yielded once and ``Turn.text()`` is the joined deltas (C09)."""
from __future__ import annotations

import random
import sys
import threading

import pytest

import bridge_client as bc
from host_support import options, session_options
from resilience_support import check_turn, echo_text, sigkill_bridge

pytestmark = pytest.mark.timeout(120)

PROMPT = "the quick brown fox jumps "


@pytest.mark.parametrize("delay", [0.0, 0.002], ids=["fast", "paced"])
def test_c09_random_drops_of_a_hot_stream_lose_and_repeat_nothing(proxied, delay):
    rng = random.Random(1509 + int(delay * 1000))
    echo = {"steps": 3, "chunks": 300 if delay == 0 else 100, "delay": delay}
    with bc.create_session(options("echo", agent_options=echo), session_options(proxied)) as session:
        assert list(session.turn("warm up"))[-1].type == "turn-finish"
        for run in range(4):
            proxy = proxied.current()
            # The next connections drop right at their first Chunk (sent by the connection's thread).
            proxy.drop_when(b'"_tag":"Chunk"', times=rng.randint(0, 2), new_only=True, rst=rng.random() < 0.5)
            stop = threading.Event()

            def dropper(stop: threading.Event = stop) -> None:
                while not stop.wait(rng.uniform(0.005, 0.15)):
                    proxied.drop_all(rst=rng.random() < 0.5)

            thread = threading.Thread(target=dropper, daemon=True)
            turn = session.turn(PROMPT)
            parts = []
            thread.start()
            try:
                for part in turn:
                    parts.append(part)
            finally:
                stop.set()
                thread.join(5)
            check_turn(parts, steps=3)
            deltas = "".join(p.text for p in parts if isinstance(p, bc.TextDelta))
            assert turn.text() == deltas == echo_text(PROMPT, 3), f"run {run}"
            assert [p.index for p in parts] == list(range(len(parts))), f"run {run}"


@pytest.mark.skipif(sys.version_info < (3, 11), reason="the delivery points are those of CPython 3.11+")
@pytest.mark.parametrize("seed", [4, 5])
def test_c09_c13_keyboard_interrupts_and_a_step_reset_keep_text_exact(sandbox, seed):
    # Turn.text() keeps strings by slice assignment and rebuilds them at a step-reset: with
    # KeyboardInterrupts at any delivery point of the read and the bridge SIGKILLed in the
    # middle of a step (its attempt discarded, delivered again), no text is lost or doubled.
    from test_resilience_host_read_loop import READ_FILES, _InterruptAtBytecodes, _read_through_interrupts

    steps, chunks = 4, 30
    prompt = "abcdefghij"
    opts = options("echo", agent_options={"steps": steps, "chunks": chunks, "delay": 0.004})
    with bc.create_session(opts, session_options(sandbox)) as session:
        turn = session.turn(prompt)
        tracer = _InterruptAtBytecodes(seed, READ_FILES)
        killed = []
        parts: list = []

        def after() -> None:
            # In the middle of step 1, once: the bridge dies; the step comes again after a reset.
            if not killed and turn.steps == 1 and len(turn.text()) > len(prompt) + 2:
                killed.append(sigkill_bridge(sandbox, session.bridge_id))
            sys.settrace(tracer)

        sys.settrace(tracer)
        try:
            parts = _read_through_interrupts(turn, after=after)
        finally:
            sys.settrace(None)
        assert tracer.raised > 20
        assert killed, "the kill point was never reached"
    assert any(isinstance(p, bc.StepReset) for p in parts), "no step was delivered again"
    check_turn(parts, steps=steps)
    assert turn.text() == prompt * steps

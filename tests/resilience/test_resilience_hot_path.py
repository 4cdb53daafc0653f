"""Drops at random moments of issue 15's hot path: while the first Chunk of a ReadTurn goes
out from the connection's thread, and while a fast stream sends from the committing or its
own thread; every part is yielded once and ``Turn.text()`` is the joined deltas (C09)."""
from __future__ import annotations

import random
import threading

import pytest

import bridge_client as bc
from host_support import options, session_options
from resilience_support import check_turn, echo_text

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

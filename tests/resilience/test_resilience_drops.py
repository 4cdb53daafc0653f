"""Dropped connections at every phase of a turn (C08, C09), a half-open connection found by the
keepalive, and the idle timer that never cuts a read in progress (C06), through a TCP proxy
the tests command (tests/resilience/resilience_proxy.py)."""
from __future__ import annotations

import pytest

import bridge_client as bc
from host_support import options, session_options
from resilience_support import check_turn, echo_text

pytestmark = pytest.mark.timeout(90)

STEPS = 3
CHUNKS = 6
PROMPT = "the quick brown fox "
ECHO = {"steps": STEPS, "chunks": CHUNKS, "delay": 0.005}


def _session(proxied, **kw):
    return bc.create_session(options("echo", agent_options=ECHO), session_options(proxied, **kw))


def _warm(session):
    """Launch the bridge (and its proxy) with a first turn."""
    assert list(session.turn("warm up"))[-1].type == "turn-finish"


@pytest.mark.parametrize("rst", [True, False], ids=["reset", "clean-close"])
def test_c08_c09_drop_before_the_answer_to_start_turn(proxied, rst):
    with _session(proxied) as session:
        _warm(session)
        proxy = proxied.current()
        # The StartTurn answer ({"turnId":..,"status":"started"}) is lost with the connection:
        # the request reached the bridge, the host never hears it did.
        proxy.drop_when(b'"status":"started"', rst=rst)
        turn = session.turn(PROMPT, turn_id="t-before-answer")
        parts = list(turn)
        assert proxy.rules_left() == 0, "the drop happened"
        assert turn.status in ("running", "finished"), "StartTurn was sent again and found the turn"
    check_turn(parts, steps=STEPS)
    assert turn.text() == echo_text(PROMPT, STEPS)


@pytest.mark.parametrize("rst", [True, False], ids=["reset", "clean-close"])
def test_c09_drops_between_chunks_lose_and_repeat_nothing(proxied, rst):
    with _session(proxied) as session:
        _warm(session)
        turn = session.turn(PROMPT)
        parts = []
        dropped = 0
        for part in turn:
            parts.append(part)
            if len(parts) in (2, 7, 8, 15):
                # None open when the parts read were already received in one Chunk.
                dropped += proxied.drop_all(rst)
        assert dropped >= 2
    check_turn(parts, steps=STEPS)
    assert [p.index for p in parts] == list(range(len(parts))), "undisturbed bridge: every offset once"
    assert turn.text() == echo_text(PROMPT, STEPS)


@pytest.mark.parametrize("rst", [True, False], ids=["reset", "clean-close"])
def test_c09_drop_right_after_the_last_part(proxied, rst):
    with _session(proxied) as session:
        _warm(session)
        proxy = proxied.current()
        proxy.drop_when(b'"turn-finish"', rst=rst, forward=True)
        turn = session.turn(PROMPT)
        parts = list(turn)
        assert proxy.rules_left() == 0
        # The session is still usable after the drop.
        assert list(session.turn("after"))[-1].type == "turn-finish"
    check_turn(parts, steps=STEPS)
    assert [p.index for p in parts] == list(range(len(parts)))


@pytest.mark.parametrize("times", [2, 3])
def test_c09_drops_in_a_row_with_nothing_read_between(proxied, times):
    with _session(proxied) as session:
        _warm(session)
        proxy = proxied.current()
        turn = session.turn(PROMPT)
        parts = []
        for part in turn:
            parts.append(part)
            if len(parts) == 5:
                before = proxy.accepted
                assert proxy.drop_all() == 1
                # The next `times` connections drop before their first Chunk reaches the host:
                # the cursor stays where it was through every one of them.
                proxy.drop_when(b'"_tag":"Chunk"', times=times, new_only=True)
        assert proxy.rules_left() == 0
        assert proxy.accepted >= before + times + 1
    check_turn(parts, steps=STEPS)
    assert [p.index for p in parts] == list(range(len(parts)))
    assert turn.text() == echo_text(PROMPT, STEPS)


def test_c09_a_slow_link_with_drops_still_delivers_every_part_once(proxied):
    with _session(proxied) as session:
        _warm(session)
        proxied.current().set_delay(0.01)
        turn = session.turn(PROMPT)
        parts = []
        for part in turn:
            parts.append(part)
            if len(parts) % 6 == 0:
                proxied.drop_all(rst=len(parts) % 12 == 0)
    check_turn(parts, steps=STEPS)
    assert [p.index for p in parts] == list(range(len(parts)))


def test_c09_keepalive_finds_a_half_open_connection_in_a_long_silent_step(proxied):
    # Silence limit: ping_interval + ping_timeout = 0.5 s; the step is silent for 1.5 s
    # between parts, so only the keepalive can notice that nothing passes any more.
    opts = options("echo", agent_options={"steps": 1, "chunks": 1, "delay": 1.5})
    so = session_options(proxied, ping_interval=0.2, ping_timeout=0.3)
    with bc.create_session(opts, so) as session:
        turn = session.turn("silent")
        first = next(turn)
        assert first.type == "turn-start"
        proxy = proxied.current()
        before = proxy.accepted
        proxy.blackhole(existing=True, new=False)  # sockets stay open; nothing passes
        parts = [first, *turn]
        assert proxy.accepted > before, "the host gave up the half-open connection and opened a new one"
    check_turn(parts, steps=1)
    assert [p.index for p in parts] == list(range(len(parts)))
    assert turn.text() == "silent"


def test_c06_the_idle_timer_never_cuts_a_read_in_progress(proxied):
    # idle_timeout (0.2 s) is far below the wait for each part (0.4 s): a read waiting for
    # its next part is use, so the connection stays for the whole turn.
    opts = options("echo", agent_options={"steps": 1, "chunks": 3, "delay": 0.4})
    with bc.create_session(opts, session_options(proxied, idle_timeout=0.2)) as session:
        _warm(session)
        before = proxied.accepted
        parts = list(session.turn("a b c"))
        assert proxied.accepted - before <= 1, "one connection for the whole read (maybe a new one to start)"
    check_turn(parts, steps=1)
    assert [p.index for p in parts] == list(range(len(parts)))

"""The resend policy as a value (C08) and the idle timer racing requests (C06)."""
from __future__ import annotations

import threading
import time

import pytest

import bridge_client as bc
from bridge_client.client.resend import MAX_BACKOFF, resend_policy
from bridge_client.errors import ConnectionLost
from bridge_client.wire import rpcs
from host_support import options, session_options

pytestmark = pytest.mark.timeout(60)


def _attempts(policy, error):
    starts = []

    def attempt():
        starts.append(time.monotonic())
        raise error

    with pytest.raises(type(error)):
        policy(attempt)
    return starts


def test_c08_resends_back_off_and_no_attempt_starts_past_the_window():
    window = 0.6
    starts = _attempts(resend_policy(window, threading.Event()), ConnectionLost("dropped"))
    assert len(starts) >= 3, "a dropped request is sent again"
    assert all(t - starts[0] <= window for t in starts), "no attempt starts after the window"
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    assert all(0 < g <= MAX_BACKOFF + 0.5 for g in gaps)
    assert gaps[-1] > gaps[0], "the pauses grow (exponential backoff)"


@pytest.mark.parametrize(
    "error",
    [bc.Unauthorized("401"), bc.TurnConflict("taken"), bc.BadRequest("bad"), bc.ProtocolError("garbled")],
    ids=lambda e: type(e).__name__,
)
def test_c08_unauthorized_typed_failures_and_protocol_errors_are_never_resent(error):
    assert len(_attempts(resend_policy(5.0, threading.Event()), error)) == 1


def test_c08_a_released_session_stops_resending_at_once():
    cancelled = threading.Event()
    cancelled.set()
    assert len(_attempts(resend_policy(30.0, cancelled), ConnectionLost("dropped"))) == 1


def test_c06_the_idle_timer_never_closes_a_connection_a_request_is_using(sandbox):
    # An idle timeout of a millisecond races every request; a request not safe to resend
    # would fail with MayHaveBeenReceived if the timer ever closed its connection under it.
    unsafe = rpcs.Rpc("CancelTurn", stream=False, resend=False, errors=(), check=rpcs.CANCEL_TURN.check)
    with bc.create_session(options("echo"), session_options(sandbox, idle_timeout=0.001)) as session:
        turn = session.turn("done")
        list(turn)
        payload = {"sessionId": session.id, "turnId": turn.id}
        errors = []

        def caller():
            try:
                for _ in range(40):
                    session._call(unsafe, payload)
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=caller) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(50)
        assert not errors, errors
        assert not any(t.is_alive() for t in threads)

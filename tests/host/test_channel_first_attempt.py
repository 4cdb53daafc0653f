"""C08: a call runs its first attempt without building the resend policy; after a drop the
policy goes on as if it had run that attempt: the same pauses, the window from the first
attempt's start, the same errors."""
from __future__ import annotations

import threading
import time
from typing import Any, List

import pytest

import bridge_client as bc
from bridge_client.client import channel as channel_mod
from bridge_client.client.resend import FIRST_BACKOFF
from bridge_client.errors import ConnectionLost

pytestmark = pytest.mark.timeout(60)


def _channel(tmp_path, window: float) -> Any:
    workspace = bc.Workspace(bc.LocalSandbox(str(tmp_path)))
    options = bc.CreateSessionOptions(workspace=workspace, resend_window=window)
    ch = channel_mod.SessionChannel("s-1", "b" * 32, None, options, None)  # type: ignore[arg-type]
    ch._ever_connected = True
    ch.connect = lambda timeout=None: object()  # type: ignore[method-assign]
    ch.drop = lambda conn=None: None  # type: ignore[method-assign]
    return ch


def test_c08_a_call_that_goes_through_runs_once_without_the_policy(tmp_path, monkeypatch):
    built: List[float] = []
    real = channel_mod.resend_policy
    monkeypatch.setattr(channel_mod, "resend_policy", lambda *a: built.append(a[0]) or real(*a))
    ch = _channel(tmp_path, 5.0)
    calls: List[float] = []
    assert ch.with_connection(lambda conn: calls.append(time.monotonic()) or "ok") == "ok"
    assert len(calls) == 1 and built == []
    tries: List[int] = []

    def once_dropped(conn: Any) -> str:
        tries.append(1)
        if len(tries) == 1:
            raise ConnectionLost("dropped")
        return "again"

    assert ch.with_connection(once_dropped) == "again" and len(tries) == 2
    assert len(built) == 1 and 4.0 < built[0] <= 5.0, "the policy gets what is left of the window"


def test_c08_after_a_drop_the_first_resend_waits_its_backoff_and_the_window_counts_from_the_first(tmp_path):
    window = 0.6
    ch = _channel(tmp_path, window)
    starts: List[float] = []

    def fn(conn: Any) -> None:
        starts.append(time.monotonic())
        raise ConnectionLost("dropped")

    with pytest.raises(bc.BridgeUnavailable):
        ch.with_connection(fn)
    assert len(starts) >= 3, "a dropped request is sent again"
    assert starts[1] - starts[0] >= FIRST_BACKOFF * 0.9, "no resend at once after the first drop"
    assert all(t - starts[0] <= window for t in starts), "no attempt starts after the window"
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    assert gaps[-1] > gaps[0], "the pauses grow (exponential backoff)"


def test_c08_overloaded_is_resent_and_a_typed_failure_is_not(tmp_path):
    ch = _channel(tmp_path, 5.0)
    tries: List[int] = []

    def fn(conn: Any) -> str:
        tries.append(1)
        if len(tries) < 3:
            raise bc.Overloaded("busy")
        return "done"

    assert ch.with_connection(fn) == "done" and len(tries) == 3
    tries.clear()

    def conflict(conn: Any) -> None:
        tries.append(1)
        raise bc.TurnConflict("taken")

    with pytest.raises(bc.TurnConflict):
        ch.with_connection(conflict)
    assert len(tries) == 1


def test_c08_a_session_released_during_the_first_attempt_is_not_resent(tmp_path):
    ch = _channel(tmp_path, 30.0)
    tries: List[int] = []

    def fn(conn: Any) -> None:
        tries.append(1)
        ch.released = True
        ch.closing.set()
        raise ConnectionLost("dropped")

    t0 = time.monotonic()
    with pytest.raises(bc.SessionReleased):
        ch.with_connection(fn)
    assert len(tries) == 1 and time.monotonic() - t0 < 1.0


def test_c08_the_window_spent_by_a_slow_first_attempt_is_not_given_again(tmp_path):
    window = 0.5
    ch = _channel(tmp_path, window)
    starts: List[float] = []

    def fn(conn: Any) -> None:
        starts.append(time.monotonic())
        if len(starts) == 1:
            threading.Event().wait(0.45)
        raise ConnectionLost("dropped")

    with pytest.raises(bc.BridgeUnavailable):
        ch.with_connection(fn)
    assert all(t - starts[0] <= window for t in starts), starts

"""Gone sandbox (C15, C16): the read raises BridgeUnavailable carrying the last session state,
and release() returns it; unreachable bridges give up at the resend window."""
from __future__ import annotations

import os
import shutil
import signal

import pytest

import bridge_client as bc
from host_support import _alive, options, session_options, wait_until
from resilience_support import bridge_pid

pytestmark = pytest.mark.timeout(60)

ECHO = {"steps": 20, "chunks": 2, "delay": 0.05}


def test_c15_a_removed_sandbox_folder_gives_bridge_unavailable_with_the_last_state(proxied, workspace):
    opts = options("echo", agent_options=ECHO)
    session = bc.create_session(opts, session_options(proxied, resend_window=3.0))
    list(session.turn("first"))
    turn = session.turn("second")
    next(turn)
    last = session.state
    assert last is not None and last.revision >= 1
    shutil.rmtree(workspace)
    # A running bridge does not need its folder (the session would go on with it); once it
    # has exited, launching another needs the sandbox, which is gone.
    pid = bridge_pid(proxied, session.bridge_id)
    os.kill(pid, signal.SIGTERM)
    assert wait_until(lambda: not _alive(pid), timeout=10.0)
    with pytest.raises(bc.BridgeUnavailable) as caught:
        for _ in turn:
            pass
    assert caught.value.state == last
    assert session.released
    assert session.release() == last
    assert session.release() == last, "release can be called twice (C16)"
    with pytest.raises(bc.SessionReleased):
        session.turn("again")
    os.mkdir(workspace)


def test_c15_an_unreachable_bridge_gives_bridge_unavailable_within_the_window(proxied):
    opts = options("echo", agent_options=ECHO)
    session = bc.create_session(opts, session_options(proxied, resend_window=1.5, open_timeout=0.5))
    turn = session.turn("cut off")
    next(turn)
    last = session.state
    for proxy in proxied.all():
        proxy.blackhole(existing=True, new=True)  # every connection, old and new, hangs
    with pytest.raises(bc.BridgeUnavailable) as caught:
        for _ in turn:
            pass
    assert caught.value.state == last
    assert session.release() == last

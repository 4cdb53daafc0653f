"""Warm ACP agents: one agent process serves a session's turns, and one left unused
``agent_idle_timeout`` seconds is stopped; the next turn starts it again and goes on in the same
ACP session (``session/load``). A turn that runs longer than the timeout keeps its agent."""
from __future__ import annotations

import re
import time

import pytest

import bridge_client as bc
from host_support import _alive, session_options, wait_until

pytestmark = pytest.mark.timeout(60)


def _pid(session, prompt="pid"):
    turn = session.turn(prompt)
    parts = list(turn)
    assert parts[-1].type == "turn-finish" and parts[-1].finish_reason == "stop", parts[-1]
    match = re.search(r"pid=(\d+)", turn.text())
    assert match, turn.text()
    return int(match.group(1))


def test_b09_acp_one_agent_process_serves_every_turn_while_it_is_used(sandbox, acp_options):
    with bc.create_session(acp_options(agent_idle_timeout=30), session_options(sandbox)) as session:
        assert len({_pid(session) for _ in range(3)}) == 1, "the warm agent answered each turn"


def test_b09_acp_agent_unused_for_its_idle_timeout_is_stopped_and_started_again(sandbox, acp_options):
    with bc.create_session(acp_options(agent_idle_timeout=0.4), session_options(sandbox)) as session:
        first = _pid(session)
        assert wait_until(lambda: not _alive(first), timeout=5), "the idle agent was stopped"
        second = _pid(session)
        assert second != first and _alive(second), "the next turn started the agent again"
        state = session.state.data
    assert state["acp_session_id"], state


def test_b09_acp_turn_longer_than_the_idle_timeout_keeps_its_agent(sandbox, acp_options):
    with bc.create_session(acp_options(agent_idle_timeout=0.3), session_options(sandbox)) as session:
        first = _pid(session)
        turn = session.turn("hold")
        for part in turn:
            if part.type == "reasoning-delta":  # "holding": the agent is in its prompt
                break
        time.sleep(1.0)  # three timeouts: a stop would have come by now
        assert _alive(first), "the running turn's agent was stopped under it"
        session.cancel_turn()
        assert list(turn)[-1].finish_reason == "cancelled"


@pytest.mark.parametrize("bad", [0, -1, "10", True])
def test_acp_agent_idle_timeout_must_be_seconds_above_zero_or_null(bad):
    from bridge_client.drivers import acp, opencode

    with pytest.raises(ValueError, match="agent_idle_timeout"):
        acp.make_driver({"command": "agent", "agent_idle_timeout": bad})
    with pytest.raises(ValueError, match="agent_idle_timeout"):
        opencode.make_driver({"executable": "/bin/true", "agent_idle_timeout": bad})
    assert acp.make_driver({"command": "agent", "agent_idle_timeout": None}).reaper.timeout is None

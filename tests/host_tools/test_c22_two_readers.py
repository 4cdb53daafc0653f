"""Two live hosts read one turn (B04) and both have the tool: the one that claimed the call
first runs it; the other's claim is answered ``running`` while the first renews its lease,
and it waits for the result instead of running the function again or declaring the first
host lost. Real bridge processes and the scripted ``openai`` model."""
from __future__ import annotations

import threading

import pytest

import bridge_client as bc
from bridge_client.client import host_calls
from host_support import session_options, wait_until

pytestmark = pytest.mark.timeout(90)


def test_c22_a_second_live_reader_waits_for_the_first_hosts_result(sandbox, model, monkeypatch):
    go = threading.Event()
    statuses = []
    real_claim = host_calls.HostCallRunner._claim

    def recording_claim(self, turn, call, tool):
        got = real_claim(self, turn, call, tool)
        statuses.append((self.host_id, got[0]))
        return got

    monkeypatch.setattr(host_calls.HostCallRunner, "_claim", recording_claim)
    first_calls, second_calls = [], []

    def lookup(key: str) -> str:
        """Look a key up (the first host: held until the second host has asked)."""
        first_calls.append(key)
        assert go.wait(30)
        return "from the first host"

    def lookup_too(key: str) -> str:
        """The same tool in the second host."""
        second_calls.append(key)
        return "from the second host"

    second = bc.host_tool(lookup_too, name="lookup", retry_on_host_loss=True)
    with bc.create_session(model("host-lookup"), session_options(sandbox, tools=[lookup])) as one:
        turn = one.turn("look alpha up")
        state = turn.state
        reader = threading.Thread(target=lambda: first_parts.extend(turn), daemon=True)
        first_parts = []
        reader.start()
        assert wait_until(lambda: len(first_calls) == 1, timeout=30), "the first host never ran it"
        host_one = next(h for h, s in statuses if s == "run")
        with bc.create_session(model("host-lookup"), session_options(sandbox, tools=[second])) as two:
            again = two.continue_turn(state)
            second_parts = []
            seen = threading.Thread(target=lambda: second_parts.extend(again), daemon=True)
            seen.start()
            asked = lambda: any(s == "running" and h != host_one for h, s in statuses)  # noqa: E731
            assert wait_until(asked, timeout=15), statuses
            go.set()
            seen.join(30)
        reader.join(30)
    assert first_calls == ["alpha"] and second_calls == [], "run once, by the first host"
    for parts in (first_parts, second_parts):
        (result,) = [p for p in parts if isinstance(p, bc.HostToolResult)]
        assert (result.output, result.by) == ("from the first host", "host")
        assert parts[-1].type == "turn-finish" and parts[-1].finish_reason == "stop"

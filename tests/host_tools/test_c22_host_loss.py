"""A host SIGKILLed while its host tool's function runs: the call stays pending in the
bridge, and the host that continues the turn (this test's process) runs the function again
only for a tool marked ``retry_on_host_loss=True``; otherwise the agent gets an error result
saying the tool may or may not have completed. Real processes: the killed host, its bridge
(the scripted ``openai`` model), and this process."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import bridge_client as bc
from host_support import session_options, wait_until

pytestmark = pytest.mark.timeout(90)

HERE = os.path.dirname(os.path.abspath(__file__))


def _kill_host_mid_call(workspace, tmp_path, log):
    state_file = str(tmp_path / "turn-state.json")
    marker = str(tmp_path / "marker")
    host = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "host_running_a_tool.py"), workspace, state_file, marker, log]
    )
    try:
        assert wait_until(lambda: os.path.exists(marker), timeout=40), "the function never started"
    finally:
        host.kill()  # SIGKILL, by pid
        host.wait(10)
    assert host.returncode == -9
    with open(marker, encoding="utf-8") as f:
        assert f.read() == "started alpha\n"
    with open(state_file, encoding="utf-8") as f:
        return bc.TurnState.from_json(f.read())


@pytest.mark.parametrize("retry", [True, False])
def test_c22_a_host_lost_while_the_function_ran_retries_only_when_marked(
    sandbox, workspace, tmp_path, model, retry
):
    state = _kill_host_mid_call(workspace, tmp_path, model.log)
    calls = []

    def lookup(key: str) -> dict:
        """Look a key up."""
        calls.append(key)
        return {"key": key, "again": True}

    tool = bc.host_tool(lookup, retry_on_host_loss=retry)
    with bc.create_session(model("host-lookup"), session_options(sandbox, tools=[tool])) as session:
        turn = session.continue_turn(state)
        parts = list(turn)
    assert turn.finish.finish_reason == "stop" and turn.text() == "Done."
    (result,) = [p for p in parts if isinstance(p, bc.HostToolResult)]
    starts = [p.host_id for p in parts if isinstance(p, bc.HostToolStart)]
    (message,) = [m for m in model.requests()[1]["body"]["messages"] if m["role"] == "tool"]
    if retry:
        assert calls == ["alpha"], "run again by the continuing host"
        assert len(set(starts)) == 2, "started by the lost host, then by this one"
        assert (result.output, result.is_error, result.by) == ({"key": "alpha", "again": True}, False, "host")
        assert json.loads(message["content"]) == {"key": "alpha", "again": True}
    else:
        assert calls == [], "never run twice"
        assert len(starts) == 1
        assert result.is_error and result.by == "host-lost"
        assert "may or may not have completed" in result.output
        assert "may or may not have completed" in message["content"]

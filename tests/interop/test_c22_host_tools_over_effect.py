"""C22 across implementations: an Effect RPC client (effect 4.1, src/host_tools_client.ts)
answers a host tool call of a bridge of this package (the openai driver against a scripted
model, tests/host_tools/host_tools_mock.py): ClaimHostTool and AnswerHostTool as the Effect
group declares them, idempotent, and the typed HostToolCallNotFound."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from bridge_harness import TOKEN, BridgeProcess, prepare_state
from interop_support import ts_command

pytestmark = pytest.mark.timeout(90)

HOST_TOOLS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "host_tools")

CHECKS = {
    "OpenSession with hostTools",
    "host-tool-call part",
    "ClaimHostTool, twice by one host",
    "AnswerHostTool, twice: the first result stands",
    "a claim after the result runs nothing",
    "typed failure HostToolCallNotFound",
    "the agent got the recorded result once",
}


@pytest.fixture
def openai_bridge(tmp_path):
    state = str(tmp_path / "state")
    mock = {"scenario": "host-lookup", "log": str(tmp_path / "requests.jsonl")}
    prepare_state(state, agent_id="openai", options={"model": "gpt-test", "mock": mock})
    bridge = BridgeProcess(
        state, str(tmp_path / "bridge-workspace"), driver="host_tools_mock:make_driver",
        env={"PYTHONPATH": os.pathsep.join([HOST_TOOLS, os.environ.get("PYTHONPATH", "")])},
    )
    try:
        yield bridge.start()
    finally:
        bridge.stop()


def test_c22_an_effect_client_answers_a_host_tool_call(openai_bridge):
    argv = ts_command("host_tools_client.ts")
    env = dict(os.environ, BRIDGE_INTEROP_URL=openai_bridge.url, BRIDGE_INTEROP_TOKEN=TOKEN)
    done = subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=60, cwd=os.path.dirname(argv[-1])
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    checks = {line["check"]: line for line in lines if "check" in line}
    failed = [c for c in checks.values() if not c["ok"]]
    assert not failed, (
        f"Effect client checks failed: {failed}\nstderr: {done.stderr[-2000:]}"
        f"\nbridge log:\n{openai_bridge.log()[-2000:]}"
    )
    assert set(checks) == CHECKS, f"missing checks: {CHECKS - set(checks)}; stderr: {done.stderr[-2000:]}"
    assert done.returncode == 0 and lines[-1] == {"summary": {"passed": len(CHECKS), "failed": 0}}

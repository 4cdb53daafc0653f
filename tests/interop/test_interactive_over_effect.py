"""C18 across implementations: an Effect RPC client (effect 4.1, src/interactive_client.ts)
answers an approval and sends a message to a bridge of this package (the shell driver, which
asks and takes messages); and our host, with approvals on, answers the approval of a bridge
written with Effect (src/bridge.ts) and sends it a message."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

import bridge_client as bc
from bridge_harness import TOKEN, BridgeProcess, prepare_state
from bridge_client.template import Template
from host_support import SECRET, kill_all_under
from interop_support import ts_command

pytestmark = pytest.mark.timeout(90)

CHECKS = {
    "OpenSession with approvals on",
    "approval-request part",
    "SendMessage is idempotent by message id",
    "AnswerApproval, twice",
    "typed failure ApprovalConflict names the first answer",
    "typed failure ApprovalNotFound",
    "user-message part and the message's own request",
    "AnswerApproval deny",
    "the turn ran the allowed command only",
    "typed failure TurnNotRunning",
}


@pytest.fixture
def shell_bridge(tmp_path):
    state = str(tmp_path / "state")
    prepare_state(state, agent_id="shell")
    bridge = BridgeProcess(state, str(tmp_path / "bridge-workspace"), driver="shell")
    try:
        yield bridge.start()
    finally:
        bridge.stop()


def test_c18_an_effect_client_answers_an_approval_and_sends_a_message(shell_bridge):
    argv = ts_command("interactive_client.ts")
    env = dict(os.environ, BRIDGE_INTEROP_URL=shell_bridge.url, BRIDGE_INTEROP_TOKEN=TOKEN)
    done = subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=60, cwd=os.path.dirname(argv[-1])
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    checks = {line["check"]: line for line in lines if "check" in line}
    failed = [c for c in checks.values() if not c["ok"]]
    assert not failed, (
        f"Effect client checks failed: {failed}\nstderr: {done.stderr[-2000:]}"
        f"\nbridge log:\n{shell_bridge.log()[-2000:]}"
    )
    assert set(checks) == CHECKS, f"missing checks: {CHECKS - set(checks)}; stderr: {done.stderr[-2000:]}"
    assert done.returncode == 0 and lines[-1] == {"summary": {"passed": len(CHECKS), "failed": 0}}


def test_c18_our_host_answers_an_effect_bridges_approval(tmp_path, monkeypatch):
    (tmp_path / "home").mkdir()
    (tmp_path / "workspace").mkdir()
    monkeypatch.setenv("BRIDGE_CLIENT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("BRIDGE_CLIENT_SECRET", SECRET)
    sandbox = bc.LocalSandbox(str(tmp_path / "workspace"))
    try:
        argv = ts_command("bridge.ts")
        options = bc.BridgeOptions(
            id="echo-effect",
            template=Template(()),
            command=argv[0],
            args=tuple(argv[1:]),
            token=bc.hmac_token(SECRET),
            bridge_idle_timeout=60.0,
        )
        so = bc.CreateSessionOptions(
            workspace=bc.Workspace(sandbox), launch_timeout=30.0, resend_window=10.0, approvals=True
        )
        with bc.create_session(options, so) as session:
            turn = session.turn("ask hello effect")
            seen = []
            for part in turn:
                seen.append(part)
                if isinstance(part, bc.ApprovalRequest):
                    assert turn.pending_approvals == [part] and part.tool_name == "echo"
                    assert turn.say("a word from the host", message_id="m1") == "m1"
                    recorded = turn.approve(part)
                    assert (recorded.decision, recorded.by) == ("allow-once", "host")
                    assert turn.approve(part) == recorded
                    with pytest.raises(bc.ApprovalConflict):
                        turn.deny(part)
        types = [p.type for p in seen]
        assert "user-message" in types and types.index("approval-request") < types.index("approval-answer")
        assert turn.text() == "hello effect" and turn.finish.finish_reason == "stop"
        assert [m.text for m in seen if isinstance(m, bc.UserMessage)] == ["a word from the host"]
    finally:
        kill_all_under(str(tmp_path / "workspace"))

"""The named ACP agents on the ``acp`` driver, with their real CLIs from npm, through a real
bridge and a real Session, offline against the scripted model server (model_server.py):
``opencode`` (OpenCode 1.18.33, ``opencode acp``; from the main lock), ``copilot`` (the
GitHub Copilot CLI 1.0.102, ``copilot --acp``) and ``codex-acp`` (Zed's codex-acp 0.16.0;
both from tests/agents/npm-more).

Each driver gets only its options (``executable``, ``base_url``, ``model``, the key's
variable) and the session's environment (a private HOME, the key): the driver itself points
the CLI at the model server. Text streams as text deltas, the model's shell tool call runs
in the sandbox's workspace and comes out as tool-call/tool-result, a second turn goes on in
the same ACP session; with approvals on, the CLI's permission request is asked of the host,
and an approval runs the command while a denial leaves no file; with approvals off on a
LocalSandbox the default policy refuses the command; cancel ends a turn; copilot refuses a
session with host tools (opencode and codex-acp call them, and a bridge SIGKILL mid-turn is
continued: test_conformance.py)."""

from __future__ import annotations

import json
import os

import pytest

import bridge_client as bc
from host_support import options, session_options
from model_server import hang, shell_call, text, text_quoting_last_tool_output
from more_clis import more_clis_prefix, program

pytestmark = pytest.mark.timeout(180)

DRIVERS = ["opencode", "copilot", "codex-acp"]
KEY = "sk-bridge-client-more-agents-0123456789abcdef"  # long: Copilot masks the key's value
COMMAND = "echo ran-$PROOF_VALUE > proof.txt && echo wrote-it"
"""The shell tool's command: ``PROOF_VALUE`` (42) is a variable of the session's environment."""
DENIED = {"codex-acp": "cancelled"}
"""A turn's finish reason after its command was refused, where it is not ``stop``: codex-acp
offers only "No, and tell Codex what to do differently" (``abort``) as its refusal, and Codex
then stops the turn (ACP ``stopReason`` ``cancelled``); the session goes on."""


@pytest.fixture(scope="module")
def more_clis():
    return more_clis_prefix()


@pytest.fixture
def real_acp(agent_clis, more_clis, model, tmp_path):
    """``real_acp(driver, **more_options)``: ``(BridgeOptions, env)`` of the driver's real CLI
    pointed at ``model`` by its options, with a private HOME in the session's environment."""

    def make(driver, **more):
        home = str(tmp_path / "agent-home")
        os.makedirs(home, exist_ok=True)
        env = {
            "HOME": home,
            "XDG_CONFIG_HOME": os.path.join(home, ".config"),
            "XDG_DATA_HOME": os.path.join(home, ".local", "share"),
            "XDG_STATE_HOME": os.path.join(home, ".local", "state"),
            "XDG_CACHE_HOME": os.path.join(home, ".cache"),
            "PROOF_VALUE": "42",
        }
        opts = {"base_url": f"{model.url}/v1", "model": "fake-model", "interrupt_grace": 2.0}
        if driver == "opencode":
            opts.update(executable=program(agent_clis, "opencode"), api_key_env="FAKE_KEY")
            env["FAKE_KEY"] = bc.Redacted(KEY)
        elif driver == "copilot":
            opts.update(executable=program(more_clis, "copilot"))
            env["COPILOT_PROVIDER_API_KEY"] = bc.Redacted(KEY)
        else:
            opts.update(executable=program(more_clis, "codex-acp"), api_key_env="FAKE_KEY")
            opts["sandbox"] = "danger-full-access"  # workspace-write needs bubblewrap, absent here
            env["FAKE_KEY"] = bc.Redacted(KEY)
            env["CODEX_HOME"] = os.path.join(home, ".codex")
            os.makedirs(env["CODEX_HOME"])
        opts.update(more)
        return options(driver, agent_options=opts), env

    return make


def _session(sandbox, opts, env, **kw):
    return bc.create_session(opts, session_options(sandbox, env=env, launch_timeout=60.0, **kw))


def _of(parts, kind):
    return [p for p in parts if p.type == kind]


def _check_clean(model):
    assert model.errors == [], model.errors
    assert model.exhausted == [], [r.text()[:500] for r in model.exhausted]


def _keys(model):
    """The bearer keys of the model server's agent requests."""
    return {r.headers.get("authorization", "").removeprefix("Bearer ") for r in model.agent_requests()}


@pytest.mark.parametrize("driver", DRIVERS)
def test_real_acp_preset_streams_text_runs_a_shell_tool_and_goes_on(
    driver, real_acp, model, sandbox, workspace
):
    opts, env = real_acp(driver, permission="allow")
    model.script(shell_call(COMMAND), text_quoting_last_tool_output("Saw: "), text("Second answer", chunks=3))
    with _session(sandbox, opts, env) as session:
        turn = session.turn("Write proof.txt")
        parts = list(turn)
        first = session.state.data
        second = session.turn("And now?")
        second_parts = list(second)
        assert session.state.data == first, "the same ACP session goes on"
    assert parts[-1].type == "turn-finish" and parts[-1].finish_reason == "stop", parts[-1]
    calls, results = _of(parts, "tool-call"), _of(parts, "tool-result")
    assert len(calls) == 1 and COMMAND in json.dumps(calls[0].input), calls
    assert [r.tool_call_id for r in results] == [calls[0].tool_call_id]
    assert "wrote-it" in json.dumps(results[0].output) and not results[0].is_error, results[0]
    with open(os.path.join(workspace, "proof.txt")) as f:
        assert f.read() == "ran-42\n", "the command ran in the workspace, with the session's variable"
    asked = [p.data for p in _of(parts, "data") if p.name == "acp-permission"]
    assert asked and asked[0]["outcome"]["outcome"] == "selected", "the CLI asked; the policy allowed"
    assert "Saw: " in turn.text() and "wrote-it" in turn.text()
    assert isinstance(first.get("acp_session_id"), str) and first["acp_session_id"]
    assert second_parts[-1].finish_reason == "stop", second_parts[-1]
    assert second.text().endswith("Second answer"), second.text()
    deltas = [p.text for p in _of(second_parts, "text-delta")]
    assert len(deltas) >= 3, f"the text streams in deltas as the model writes it: {deltas}"
    requests = model.agent_requests()
    assert len(requests) == 3
    later = requests[2].text()
    assert "Write proof.txt" in later and "And now?" in later, "the second prompt went on in the conversation"
    assert _keys(model) == {KEY}, "the key came from the session's environment"
    _check_clean(model)


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("allow", [True, False], ids=["approve", "deny"])
def test_c18_real_acp_preset_asks_the_host_before_its_shell_tool(
    driver, allow, real_acp, model, sandbox, workspace
):
    opts, env = real_acp(driver)
    model.script(shell_call(COMMAND), text_quoting_last_tool_output())
    with _session(sandbox, opts, env, approvals=True) as session:
        turn = session.turn("Write proof.txt")
        parts = []
        for part in turn:
            parts.append(part)
            if part.type == "approval-request":
                turn.approve(part) if allow else turn.deny(part, message="not that")
    assert parts[-1].finish_reason == ("stop" if allow else DENIED.get(driver, "stop")), parts[-1]
    (request,) = _of(parts, "approval-request")
    (call,) = _of(parts, "tool-call")
    assert request.tool_call_id == call.tool_call_id and request.tool_name == "execute", request
    assert "allow-once" in request.choices and "deny" in request.choices, request.choices
    assert [a.decision for a in _of(parts, "approval-answer")] == ["allow-once" if allow else "deny"]
    assert not _of(parts, "data") or not [p for p in _of(parts, "data") if p.name == "acp-permission"], (
        "the host answered, not the policy"
    )
    proof = os.path.join(workspace, "proof.txt")
    if allow:
        with open(proof) as f:
            assert f.read() == "ran-42\n", "the approved command ran"
        assert "wrote-it" in turn.text()
    else:
        assert not os.path.exists(proof), "the denied command did not run"
        assert "wrote-it" not in turn.text()
    _check_clean(model)


@pytest.mark.parametrize("driver", DRIVERS)
def test_real_acp_preset_on_a_local_sandbox_refuses_commands_by_default(
    driver, real_acp, model, sandbox, workspace
):
    opts, env = real_acp(driver)  # no permission option: the default on a LocalSandbox
    model.script(shell_call(COMMAND), text_quoting_last_tool_output())
    with _session(sandbox, opts, env) as session:
        parts = list(session.turn("Write proof.txt"))
    assert parts[-1].finish_reason == DENIED.get(driver, "stop"), parts[-1]
    asked = [p.data for p in _of(parts, "data") if p.name == "acp-permission"]
    assert len(asked) == 1, asked
    assert not os.path.exists(os.path.join(workspace, "proof.txt")), "the policy refused the command"
    _check_clean(model)


@pytest.mark.parametrize("driver", DRIVERS)
def test_real_acp_preset_cancel_ends_the_turn_and_the_session_goes_on(driver, real_acp, model, sandbox):
    opts, env = real_acp(driver)
    model.script(hang(text("Working on it", chunks=1)), text("after the cancel"))
    with _session(sandbox, opts, env) as session:
        turn = session.turn("A long task")
        parts = []
        for part in turn:
            parts.append(part)
            if part.type == "text-delta" and "Working on it" in part.text:
                turn.cancel()
        model.release()
        assert parts[-1].finish_reason == "cancelled", parts[-1]
        after = session.turn("Go on")
        after_parts = list(after)
    assert after_parts[-1].finish_reason == "stop", after_parts[-1]
    assert "after the cancel" in after.text(), after.text()


@pytest.mark.parametrize("driver", ["opencode", "codex-acp", "copilot", "cline"])
def test_c22_acp_presets_whose_cli_calls_mcp_tools_accept_host_tools(driver):
    """They call them through the real CLIs in test_conformance.py; vibe, aider refuse them
    (test_real_agents_cline_vibe_aider.py)."""
    from bridge_client.agent import NO_HOST_TOOLS
    from bridge_client.drivers import cline, codex_acp, copilot, opencode

    assert driver not in NO_HOST_TOOLS
    module = {"opencode": opencode, "codex-acp": codex_acp, "copilot": copilot, "cline": cline}[driver]
    made = module.make_driver({"executable": "/bin/true"})
    assert made.supports_host_tools is True

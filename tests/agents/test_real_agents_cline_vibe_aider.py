"""The ``cline``, ``vibe`` and ``aider`` drivers with their real CLIs, through a real bridge and
a real Session, offline against the scripted model server (model_server.py): the Cline CLI
3.0.65 (npm, ``cline --acp``) and Mistral Vibe 3.0.2 (PyPI, Python 3.12 or later,
``vibe-acp``) on the ``acp`` driver, and Aider 0.86.2 (PyPI) one run per turn. The CLIs are
installed by ``cli_venvs.py`` into cached private prefixes.

Each driver gets only its options (``executable``, ``base_url``, ``model``) and the session's
environment (a private HOME, the key, ``PROOF_VALUE``): the driver points the CLI at the
model server itself.

- cline and vibe: text streams as text deltas, the model's shell tool call runs in the
  sandbox's workspace with the session's variable and comes out as tool-call/tool-result, a
  second turn goes on in the same ACP session; with approvals on, the CLI's permission
  request is asked of the host, an approval runs the command and a denial leaves no file;
  cancel ends a turn and the session goes on; a message to a running turn is the next prompt;
  a session with host tools is refused. Cline's hub helper (a detached process of its own)
  never outlives its agent: not after a release (C16), nor after a SIGKILLed bridge.
- aider: the model's answer streams as text and its SEARCH/REPLACE edit block creates the
  file in the workspace (an ``edit`` tool-call/tool-result); the next turn's request holds
  the earlier conversation (Aider's chat history); approvals, messages to a running turn and
  host tools are refused with their typed errors; an edit block that matches nothing is a
  failed edit; cancel ends a turn.
"""

from __future__ import annotations

import json
import os
import signal
import threading

import pytest

import bridge_client as bc
from cli_venvs import cline_program, py_program
from host_support import options, session_options, wait_until
from model_server import Text, hang, shell_call, text, text_quoting_last_tool_output, tool_call

pytestmark = pytest.mark.timeout(240)

ACP_DRIVERS = ["cline", "vibe"]
KEY = "sk-bridge-client-cline-vibe-aider-0123456789"
COMMAND = "echo ran-$PROOF_VALUE > proof.txt && echo wrote-it"
"""The shell tool's command: ``PROOF_VALUE`` (42) is a variable of the session's environment."""


def _shell(command):
    """The model's shell tool call: Cline's is ``run_commands`` (``{"commands": [...]}``)."""

    def build(request):
        tools = dict(request.tools())
        if "run_commands" in tools:
            return tool_call("run_commands", {"commands": [command]}).blocks(request)
        return shell_call(command).blocks(request)

    from model_server import Reply

    return Reply(build)


@pytest.fixture(scope="module")
def programs():
    """Driver name to a function giving its installed program (installing it on first use)."""
    return {
        "cline": lambda: cline_program(),
        "vibe": lambda: py_program("vibe", "vibe-acp"),
        "aider": lambda: py_program("aider", "aider"),
    }


@pytest.fixture
def real(programs, model, tmp_path):
    """``real(driver, **more_options)``: ``(BridgeOptions, env)`` of the driver's real CLI
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
            "OPENAI_API_KEY": bc.Redacted(KEY),
            "PROOF_VALUE": "42",
        }
        opts = {"executable": programs[driver](), "base_url": f"{model.url}/v1", "interrupt_grace": 2.0}
        opts["model"] = "openai/fake-model" if driver == "aider" else "fake-model"
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


def _hubs(workspace):
    """Pids of Cline hub helpers (``cline --cline-hub-daemon --cwd WORKSPACE``) still running."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"--cline-hub-daemon" in argv and workspace.encode() in argv:
            found.append(int(name))
    return found


def _keys(model):
    return {r.headers.get("authorization", "").removeprefix("Bearer ") for r in model.agent_requests()}


# ----------------------------------------------------------------------------- cline, vibe


@pytest.mark.parametrize("driver", ACP_DRIVERS)
def test_real_cline_vibe_stream_text_run_a_shell_tool_and_go_on(driver, real, model, sandbox, workspace):
    opts, env = real(driver, permission="allow")
    model.script(_shell(COMMAND), text_quoting_last_tool_output("Saw: "), text("Second answer", chunks=3))
    with _session(sandbox, opts, env) as session:
        turn = session.turn("Write proof.txt")
        parts = list(turn)
        first = session.state.data
        second = session.turn("And now?")
        second_parts = list(second)
        assert session.state.data == first, "the same ACP session goes on"
        if driver == "cline":
            assert len(_hubs(workspace)) == 1, "the agent has a hub of its own"
    if driver == "cline":
        assert wait_until(lambda: not _hubs(workspace), timeout=20), "the agent's hub ended with it"
    assert parts[-1].type == "turn-finish" and parts[-1].finish_reason == "stop", parts[-1]
    calls, results = _of(parts, "tool-call"), _of(parts, "tool-result")
    assert len(calls) == 1 and "proof.txt" in json.dumps(calls[0].input), calls
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
    assert len(_of(second_parts, "text-delta")) >= 2, "the text streams in deltas"
    requests = model.agent_requests()
    assert len(requests) == 3
    assert "Write proof.txt" in requests[2].text() and "And now?" in requests[2].text()
    assert _keys(model) == {KEY}, "the key came from the session's environment"
    _check_clean(model)


def test_c16_real_cline_leaves_no_hub_after_a_sigkilled_bridge_or_release(real, model, sandbox, workspace):
    opts, env = real("cline")
    model.script(text("First answer"), text("after the restart"))
    with _session(sandbox, opts, env) as session:
        assert list(session.turn("Hello"))[-1].finish_reason == "stop"
        (hub,) = _hubs(workspace)
        os.kill(session._hello.pid, signal.SIGKILL)
        assert wait_until(lambda: hub not in _hubs(workspace), timeout=20), (
            "the killed bridge's keeper ended the agent, and the launcher's watchdog its hub"
        )
        after = session.turn("Go on")
        assert list(after)[-1].finish_reason == "stop"
        assert "after the restart" in after.text()
    assert wait_until(lambda: not _hubs(workspace), timeout=20)


@pytest.mark.parametrize("driver", ACP_DRIVERS)
@pytest.mark.parametrize("allow", [True, False], ids=["approve", "deny"])
def test_c18_real_cline_vibe_ask_the_host_before_their_shell_tool(
    driver, allow, real, model, sandbox, workspace
):
    opts, env = real(driver)
    model.script(_shell(COMMAND), text_quoting_last_tool_output())
    with _session(sandbox, opts, env, approvals=True) as session:
        turn = session.turn("Write proof.txt")
        parts = []
        for part in turn:
            parts.append(part)
            if part.type == "approval-request":
                turn.approve(part) if allow else turn.deny(part, message="not that")
    assert parts[-1].type == "turn-finish", parts[-1]
    (request,) = _of(parts, "approval-request")
    assert "allow-once" in request.choices and "deny" in request.choices, request.choices
    assert [a.decision for a in _of(parts, "approval-answer")] == ["allow-once" if allow else "deny"]
    policy = [p for p in _of(parts, "data") if p.name == "acp-permission"]
    assert not policy, "the host answered, not the policy"
    proof = os.path.join(workspace, "proof.txt")
    if allow:
        assert parts[-1].finish_reason == "stop", parts[-1]
        with open(proof) as f:
            assert f.read() == "ran-42\n", "the approved command ran"
    else:
        assert not os.path.exists(proof), "the denied command did not run"
    _check_clean(model)


@pytest.mark.parametrize("driver", ACP_DRIVERS)
def test_real_cline_vibe_on_a_local_sandbox_refuse_commands_by_default(
    driver, real, model, sandbox, workspace
):
    opts, env = real(driver)  # no permission option: the default on a LocalSandbox
    model.script(_shell(COMMAND), text_quoting_last_tool_output())
    with _session(sandbox, opts, env) as session:
        parts = list(session.turn("Write proof.txt"))
    assert parts[-1].type == "turn-finish", parts[-1]
    asked = [p.data for p in _of(parts, "data") if p.name == "acp-permission"]
    assert len(asked) == 1, asked
    assert not os.path.exists(os.path.join(workspace, "proof.txt")), "the policy refused the command"
    _check_clean(model)


@pytest.mark.parametrize("driver", ACP_DRIVERS)
def test_real_cline_vibe_cancel_ends_the_turn_and_the_session_goes_on(driver, real, model, sandbox):
    opts, env = real(driver)
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


# ----------------------------------------------------------------------------- aider

EDIT = "I will create the file.\n\nproof.txt\n```\n<<<<<<< SEARCH\n=======\nran-42\n>>>>>>> REPLACE\n```\n"
"""An answer in Aider's diff edit format: an empty SEARCH part creates ``proof.txt``."""


def _aider_script(model, *answers):
    """Aider offers no tools, so its requests are the server's side requests: answer them
    with ``answers`` in order (the last one again after them)."""
    queue = list(answers)

    def reply(request):
        return [Text(queue.pop(0) if len(queue) > 1 else queue[0], 4)]

    model.side_reply = reply


def test_real_aider_streams_text_applies_its_edit_block_and_goes_on(real, model, sandbox, workspace):
    opts, env = real("aider")
    _aider_script(model, EDIT, "Nothing more to do.")
    with _session(sandbox, opts, env) as session:
        turn = session.turn("Write proof.txt")
        parts = list(turn)
        second = session.turn("And now?")
        second_parts = list(second)
    assert parts[-1].type == "turn-finish" and parts[-1].finish_reason == "stop", parts[-1]
    with open(os.path.join(workspace, "proof.txt")) as f:
        assert f.read() == "ran-42\n", "Aider applied the model's edit block in the workspace"
    (call,) = _of(parts, "tool-call")
    (result,) = _of(parts, "tool-result")
    assert call.tool_name == "edit" and call.input == {"path": "proof.txt"}, call
    assert result.tool_call_id == call.tool_call_id and not result.is_error, result
    assert "I will create the file." in turn.text() and "<<<<<<< SEARCH" in turn.text(), turn.text()
    assert len(_of(parts, "text-delta")) >= 3, "the answer streams, a line at a time"
    assert not any("Tokens:" in p.text for p in _of(parts, "text-delta")), "Aider's own lines are not text"
    assert second_parts[-1].finish_reason == "stop", second_parts[-1]
    assert "Nothing more to do." in second.text(), second.text()
    assert not _of(second_parts, "tool-call")
    chats = [r for r in model.requests if r.api == "chat"]
    assert len(chats) == 2, [r.path for r in model.requests]
    later = chats[1].text()
    assert "Write proof.txt" in later and "I will create the file." in later and "And now?" in later, (
        "the second turn's request holds the first turn's conversation"
    )
    assert {r.headers.get("authorization", "").removeprefix("Bearer ") for r in chats} == {KEY}
    assert model.unknown == [] and model.errors == []


def test_real_aider_reports_an_edit_block_that_matched_nothing_as_a_failed_edit(
    real, model, sandbox, workspace
):
    with open(os.path.join(workspace, "proof.txt"), "w") as f:
        f.write("old\n")
    opts, env = real("aider")
    wrong = EDIT.replace("<<<<<<< SEARCH\n", "<<<<<<< SEARCH\nnot in the file\n")
    _aider_script(model, wrong)
    with _session(sandbox, opts, env) as session:
        parts = list(session.turn("Change proof.txt"))
    assert parts[-1].finish_reason == "stop", parts[-1]
    results = _of(parts, "tool-result")
    assert results and all(r.is_error for r in results), results
    assert "SearchReplaceNoExactMatch" in json.dumps(results[0].output), results[0]
    assert [c.input for c in _of(parts, "tool-call")][0] == {"path": "proof.txt"}
    with open(os.path.join(workspace, "proof.txt")) as f:
        assert f.read() == "old\n", "nothing was changed"


def test_real_aider_cancel_ends_the_turn_and_the_session_goes_on(real, model, sandbox, workspace):
    opts, env = real("aider")
    asked, gate = [], threading.Event()

    def reply(request):  # runs in the server's thread: the first answer waits for the gate
        asked.append(request)
        if len(asked) == 1:
            gate.wait(60)
            return [Text(EDIT, 1)]
        return [Text("After the cancel.", 2)]

    model.side_reply = reply
    try:
        with _session(sandbox, opts, env) as session:
            turn = session.turn("A long task")
            parts = []
            reader = threading.Thread(target=lambda: parts.extend(turn), daemon=True)
            reader.start()
            assert wait_until(lambda: len(asked) >= 1, timeout=90), "Aider asked the model"
            turn.cancel()
            reader.join(60)
            assert not reader.is_alive()
            assert parts[-1].finish_reason == "cancelled", parts[-1]
            gate.set()
            after = session.turn("Go on")
            after_parts = list(after)
    finally:
        gate.set()
    assert after_parts[-1].finish_reason == "stop", after_parts[-1]
    assert "After the cancel." in after.text(), after.text()
    assert not os.path.exists(os.path.join(workspace, "proof.txt")), "the cancelled answer was never applied"


def test_c18_aider_refuses_approvals_and_messages_with_their_typed_errors(real, model, sandbox):
    opts, env = real("aider")
    with pytest.raises(bc.ApprovalsUnsupported, match="aider"):
        with _session(sandbox, opts, env, approvals=True) as session:
            list(session.turn("Anything"))
    _aider_script(model, "Fine.")
    with _session(sandbox, opts, env) as session:
        turn = session.turn("Say something")
        with pytest.raises(bc.MessagesUnsupported):
            turn.say("and this")
        parts = list(turn)
    assert parts[-1].finish_reason == "stop", parts[-1]


@pytest.mark.parametrize("driver", ["vibe", "aider"])
def test_c22_vibe_aider_refuse_host_tools(driver, sandbox):
    def lookup(word: str) -> str:
        """Look a word up."""
        return word

    opts = options(driver, agent_options={"executable": "/nonexistent/agent"})
    with pytest.raises(bc.ToolsUnsupported, match=f"the {driver} agent cannot call host tools"):
        bc.create_session(opts, session_options(sandbox), tools=[lookup])

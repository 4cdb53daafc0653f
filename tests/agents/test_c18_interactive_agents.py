"""Interactive turns with the real agent CLIs and the ``openai`` driver, through a real bridge
and a real Session, offline against the scripted model server (model_server.py):

- claude-code asks before a tool through its own stdio permission protocol
  (``--permission-prompt-tool stdio``): allowed, the command really runs; denied, it does not,
  and the model's next request carries the user's message; an allow-always answer is remembered
  for the session's later asks;
- a message sent to a running claude-code turn reaches the model in its next request (with the
  tool result of the running turn, or as one more CLI turn after the model had finished);
- the openai driver asks before each tool call, and takes messages before its next step;
- qwen asks over the same protocol; a cancel while claude-code waits for an answer runs nothing;
- a CLI that offers no way to ask (codex's non-interactive exec) refuses ``approvals=True``
  with ApprovalsUnsupported;
- a bridge SIGKILLed while a claude-code request is pending: the repeated step asks again and
  the command runs once.
"""

from __future__ import annotations

import json
import os
import signal
import threading

import pytest

import bridge_client as bc
from host_support import options, session_options, wait_until
from model_server import ModelServer, hang, shell_call, text, text_quoting_last_tool_output
from test_real_agents import _cli_processes

pytestmark = pytest.mark.timeout(120)


def _session(sandbox, cli, **kw):
    return bc.create_session(
        options(cli.driver, agent_options=cli.agent_options),
        session_options(sandbox, launch_timeout=60.0, resend_window=30.0, **kw),
    )


def _of(parts, kind):
    return [p for p in parts if p.type == kind]


def _answer_each(turn, answer, seen=None):
    """Read the whole turn, answering each approval request with ``answer(turn, request)``."""
    parts = []
    for part in turn:
        parts.append(part)
        if part.type == "approval-request":
            if seen is not None:
                seen(part)
            answer(turn, part)
    return parts


def _check_clean(model):
    assert model.errors == [], model.errors
    assert model.exhausted == [], [r.text()[:500] for r in model.exhausted]


# ----------------------------------------------------------------------------- claude-code


def test_c18_claude_code_asks_before_its_tool_and_runs_it_when_allowed(real_cli, model, sandbox, workspace):
    cli = real_cli("claude-code")  # bypassPermissions in its options: approvals turn it off
    model.script(shell_call("echo hi > f.txt && echo wrote-it"), text_quoting_last_tool_output("Saw: "))
    target = os.path.join(workspace, "f.txt")
    before = []
    with _session(sandbox, cli, approvals=True) as session:
        turn = session.turn("Write f.txt")
        parts = _answer_each(
            turn, lambda t, r: t.approve(r), seen=lambda r: before.append(os.path.exists(target))
        )
    assert parts[-1].type == "turn-finish" and parts[-1].finish_reason == "stop", parts[-1]
    (request,) = _of(parts, "approval-request")
    (call,) = _of(parts, "tool-call")
    assert before == [False], "the command had not run when the CLI asked"
    assert request.tool_name == "Bash" and request.tool_call_id == call.tool_call_id
    assert request.input["command"] == "echo hi > f.txt && echo wrote-it"
    assert request.title == "Bash: echo hi > f.txt && echo wrote-it"
    assert list(request.choices) == ["allow-once", "allow-always", "deny"]
    (answer,) = _of(parts, "approval-answer")
    assert (answer.request_id, answer.decision, answer.by) == (request.request_id, "allow-once", "host")
    assert parts.index(call) < parts.index(request) < parts.index(answer)
    (result,) = _of(parts, "tool-result")
    assert not result.is_error and "wrote-it" in json.dumps(result.output), result
    assert parts.index(answer) < parts.index(result)
    with open(target) as f:
        assert f.read() == "hi\n", "the allowed command ran in the workspace"
    assert turn.text() == "Saw: wrote-it"
    _check_clean(model)


def test_c18_claude_code_denied_tool_does_not_run_and_the_model_reads_why(
    real_cli, model, sandbox, workspace
):
    cli = real_cli("claude-code")
    model.script(shell_call("echo hi > f.txt && echo wrote-it"), text_quoting_last_tool_output("Saw: "))
    with _session(sandbox, cli, approvals=True) as session:
        turn = session.turn("Write f.txt")
        parts = _answer_each(turn, lambda t, r: t.deny(r, message="not in this folder"))
    assert parts[-1].finish_reason == "stop", parts[-1]
    (answer,) = _of(parts, "approval-answer")
    assert (answer.decision, answer.message, answer.by) == ("deny", "not in this folder", "host")
    (result,) = _of(parts, "tool-result")
    assert result.is_error and "not in this folder" in json.dumps(result.output), result
    assert not os.path.exists(os.path.join(workspace, "f.txt")), "the denied command did not run"
    requests = model.agent_requests()
    assert len(requests) == 2
    assert "not in this folder" in requests[1].tool_outputs()[-1], "the model was told why"
    _check_clean(model)


def test_c18_claude_code_allow_always_answers_the_sessions_later_asks(real_cli, model, sandbox, workspace):
    cli = real_cli("claude-code")
    model.script(shell_call("echo one > a.txt"), shell_call("echo two > b.txt"), text("done"))
    asked = []
    with _session(sandbox, cli, approvals=True) as session:
        turn = session.turn("Write two files")
        # Only the first request is the host's to answer: the later ones the session's
        # remembered allow-always answers itself.
        parts = _answer_each(turn, lambda t, r: t.approve(r, always=True) if len(asked) == 1 else None,
                             seen=asked.append)
    assert parts[-1].finish_reason == "stop", parts[-1]
    answers = _of(parts, "approval-answer")
    # 2.1.332's own rule (Bash(echo one *)) does not cover the second command: it asks again,
    # and the session's remembered allow-always answers without the host.
    assert [(a.decision, a.by) for a in answers] == [("allow-always", "host"), ("allow-always", "policy")]
    assert len(asked) == len(answers), "no request went unanswered"
    assert all(os.path.exists(os.path.join(workspace, f)) for f in ("a.txt", "b.txt"))
    assert not os.path.exists(os.path.join(workspace, ".claude", "settings.local.json")), (
        "the CLI's rule stayed in its session: nothing written into the workspace"
    )
    _check_clean(model)


def test_c18_claude_code_cancel_while_a_request_is_pending_runs_nothing(real_cli, model, sandbox, workspace):
    cli = real_cli("claude-code")
    model.script(shell_call("echo hi > f.txt"), text("unused"))
    with _session(sandbox, cli, approvals=True) as session:
        turn = session.turn("Write f.txt")
        parts = _answer_each(turn, lambda t, r: t.cancel())
        program = os.path.basename(cli.agent_options["executable"])
        assert wait_until(lambda: not _cli_processes(workspace, program), timeout=10), "the CLI ended"
    assert parts[-1].finish_reason == "cancelled", parts[-1]
    (answer,) = _of(parts, "approval-answer")
    assert (answer.decision, answer.by) == ("deny", "cancel")
    assert not os.path.exists(os.path.join(workspace, "f.txt")), "the command did not run"


@pytest.mark.parametrize("allow", [True, False])
def test_c18_qwen_asks_before_its_tool_over_the_same_protocol(real_cli, model, sandbox, workspace, allow):
    cli = real_cli("qwen")  # approval_mode yolo in its options: approvals make it "default"
    model.script(shell_call("echo hi > f.txt && echo wrote-it"), text_quoting_last_tool_output("Saw: "))
    with _session(sandbox, cli, approvals=True) as session:
        turn = session.turn("Write f.txt")
        parts = _answer_each(turn, lambda t, r: t.approve(r) if allow else t.deny(r, message="not here"))
    assert parts[-1].finish_reason == "stop", parts[-1]
    (request,) = _of(parts, "approval-request")
    (call,) = _of(parts, "tool-call")
    assert (request.tool_name, request.tool_call_id) == ("run_shell_command", call.tool_call_id)
    assert request.title == "run_shell_command: echo hi > f.txt && echo wrote-it"
    (result,) = _of(parts, "tool-result")
    assert result.is_error is (not allow)
    assert os.path.exists(os.path.join(workspace, "f.txt")) is allow
    if not allow:
        assert "not here" in model.agent_requests()[-1].tool_outputs()[-1]
    _check_clean(model)


def _wait_for_part(parts, predicate, timeout=30.0):
    assert wait_until(lambda: any(predicate(p) for p in list(parts)), timeout=timeout), (
        f"no such part among {[p.type for p in parts]}"
    )


def _read_in_thread(turn):
    parts = []

    def read():
        for part in turn:
            parts.append(part)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return parts, reader


def test_c18_claude_code_steering_message_reaches_the_model_in_its_next_request(
    real_cli, model, sandbox, workspace
):
    """The message is sent while the command of the turn runs (it waits for a file the test
    makes once the CLI has queued the message): the model's next request carries it with the
    command's result, and the turn goes on to its end in one CLI turn."""
    cli = real_cli("claude-code")
    go = os.path.join(workspace, "go")
    model.script(
        shell_call("for i in $(seq 600); do [ -e go ] && break; sleep 0.05; done; echo waited"),
        text("Noted the bananas"),
    )
    with _session(sandbox, cli) as session:
        turn = session.turn("Wait for go")
        parts, reader = _read_in_thread(turn)
        _wait_for_part(parts, lambda p: p.type == "tool-call")
        message_id = turn.say("Also mention bananas")
        _wait_for_part(parts, lambda p: p.type == "data" and p.name == "claude-code-message"
                       and p.data == {"messageId": message_id, "state": "queued"})
        open(go, "w").close()
        reader.join(60)
        assert not reader.is_alive()
    assert parts[-1].finish_reason == "stop", parts[-1]
    (said,) = _of(parts, "user-message")
    assert (said.message_id, said.text) == (message_id, "Also mention bananas")
    requests = model.agent_requests()
    assert len(requests) == 2
    assert "Also mention bananas" in requests[1].text(), "the model's next request carries the message"
    assert "Also mention bananas" not in requests[0].text()
    assert requests[1].tool_outputs()[-1].strip() == "waited", "alongside the running turn's tool result"
    assert turn.text() == "Noted the bananas"
    _check_clean(model)


def test_c18_claude_code_message_after_the_models_answer_gets_one_more_model_call(
    real_cli, model, sandbox, workspace
):
    """Sent while the model writes its final answer: the CLI answers the turn, then takes the
    message as its next turn in the same run; the bridge's turn ends after that one."""
    cli = real_cli("claude-code")
    model.script(hang(text("Working on it", chunks=1)), text("Bananas added"))
    with _session(sandbox, cli) as session:
        turn = session.turn("Say something")
        parts, reader = _read_in_thread(turn)
        _wait_for_part(parts, lambda p: p.type == "text-delta" and "Working" in p.text)
        message_id = turn.say("Now add bananas")
        _wait_for_part(parts, lambda p: p.type == "data" and p.name == "claude-code-message"
                       and p.data.get("messageId") == message_id)
        model.release()
        reader.join(60)
        assert not reader.is_alive()
    assert parts[-1].finish_reason == "stop", parts[-1]
    assert turn.text() == "Working on itBananas added"
    requests = model.agent_requests()
    assert len(requests) == 2 and "Now add bananas" in requests[1].text()
    _check_clean(model)


def test_c18_b05_claude_code_pending_request_is_asked_again_after_a_bridge_sigkill(
    real_cli, model, sandbox, workspace
):
    """The bridge dies while the CLI waits for the host's answer: the keeper ends the CLI, the
    next bridge runs the unfinished step again (a new attempt), the CLI asks again with a new
    request id, and the command, allowed then, runs once."""
    cli = real_cli("claude-code", continue_prompt="Go on.")
    model.script(shell_call("echo ran >> log.txt"), shell_call("echo ran >> log.txt"), text("logged"))
    with _session(sandbox, cli, approvals=True) as session:
        turn = session.turn("Log it")
        parts = []
        killed = None
        for part in turn:
            parts.append(part)
            if part.type == "approval-request":
                if killed is None:
                    killed = session._hello.pid
                    os.kill(killed, signal.SIGKILL)
                else:
                    turn.approve(part)
        assert killed is not None and session._hello.pid != killed
    assert parts[-1].finish_reason == "stop", parts[-1]
    requests = _of(parts, "approval-request")
    assert len(requests) == 2 and requests[0].request_id != requests[1].request_id, requests
    assert _of(parts, "step-reset"), "the unfinished step was discarded"
    with open(os.path.join(workspace, "log.txt")) as f:
        assert f.read() == "ran\n", "the command ran once, after the second ask"
    _check_clean(model)


# ----------------------------------------------------------------------------- codex


def test_c18_codex_exec_refuses_approvals_with_a_typed_error(real_cli, model, sandbox, workspace):
    cli = real_cli("codex")
    with pytest.raises(bc.ApprovalsUnsupported, match="codex"):
        with _session(sandbox, cli, approvals=True) as session:
            list(session.turn("Anything"))
    with _session(sandbox, cli) as session:  # without approvals the same bridge is fine
        model.script(text("fine"))
        turn = session.turn("Anything")
        assert list(turn)[-1].finish_reason == "stop"


# ----------------------------------------------------------------------------- openai


@pytest.fixture
def chat_model():
    with ModelServer() as server:
        yield server


def _openai_session(sandbox, server, **kw):
    agent = {"model": "test-model", "base_url": f"{server.url}/v1", "max_retries": 0}
    return bc.create_session(options("openai", agent_options=agent), session_options(sandbox, **kw))


def test_c18_openai_asks_before_each_tool_call_allowed_runs_denied_does_not(chat_model, sandbox, workspace):
    chat_model.script(
        shell_call("echo one > one.txt && echo made-one"),
        shell_call("echo two > two.txt && echo made-two"),
        text_quoting_last_tool_output("Saw: "),
    )
    decisions = iter(["allow", "deny"])

    def answer(turn, request):
        if next(decisions) == "allow":
            turn.approve(request)
        else:
            turn.deny(request, message="two is enough")

    with _openai_session(sandbox, chat_model, approvals=True) as session:
        turn = session.turn("Make two files")
        parts = _answer_each(turn, answer)
    assert parts[-1].finish_reason == "stop", parts[-1]
    requests = _of(parts, "approval-request")
    assert [r.tool_name for r in requests] == ["run_command", "run_command"]
    assert requests[0].title == "run_command: echo one > one.txt && echo made-one"
    assert [a.decision for a in _of(parts, "approval-answer")] == ["allow-once", "deny"]
    results = _of(parts, "tool-result")
    assert [r.is_error for r in results] == [False, True]
    assert "two is enough" in json.dumps(results[1].output)
    assert os.path.exists(os.path.join(workspace, "one.txt"))
    assert not os.path.exists(os.path.join(workspace, "two.txt")), "the denied command did not run"
    last = chat_model.agent_requests()[-1]
    assert "two is enough" in last.tool_outputs()[-1], "the denial went back to the model"
    _check_clean(chat_model)


def test_c18_openai_without_approvals_runs_tools_unasked(chat_model, sandbox, workspace):
    chat_model.script(shell_call("echo one > one.txt"), text("done"))
    with _openai_session(sandbox, chat_model) as session:
        parts = list(session.turn("Make a file"))
    assert parts[-1].finish_reason == "stop"
    assert not _of(parts, "approval-request") and not _of(parts, "approval-answer")
    assert os.path.exists(os.path.join(workspace, "one.txt"))


def test_c18_openai_message_is_a_user_message_of_the_next_model_call(chat_model, sandbox, workspace):
    go = os.path.join(workspace, "go")
    chat_model.script(
        shell_call("for i in $(seq 600); do [ -e go ] && break; sleep 0.05; done; echo waited"),
        text("Bananas, noted"),
    )
    with _openai_session(sandbox, chat_model) as session:
        turn = session.turn("Wait for go")
        parts, reader = _read_in_thread(turn)
        _wait_for_part(parts, lambda p: p.type == "tool-call")
        turn.say("Mention bananas")
        _wait_for_part(parts, lambda p: p.type == "user-message")
        open(go, "w").close()
        reader.join(60)
        assert not reader.is_alive()
        state = session.state.data
    assert parts[-1].finish_reason == "stop", parts[-1]
    second = chat_model.agent_requests()[1].body["messages"]
    assert second[-1] == {"role": "user", "content": "Mention bananas"}, second[-2:]
    assert second[-2]["role"] == "tool", "after the running step's tool result"
    assert {"role": "user", "content": "Mention bananas"} in state["messages"], "kept in the conversation"
    _check_clean(chat_model)

"""The ``claude-code`` driver through a real bridge and a real Session, against a fake
``claude`` first on PATH that prints recorded stream-json messages (tests/drivers/fake_cli.py;
the message shapes follow anthropics/claude-agent-sdk-python's message_parser.py)."""

from __future__ import annotations

import json
import os
import signal

import pytest

import bridge_client as bc
from bridge_client.drivers.claude_code import DEFAULT_CONTINUE_PROMPT
from host_support import options, session_options

pytestmark = pytest.mark.timeout(60)

SID = "sess-1"
INIT = {
    "type": "system",
    "subtype": "init",
    "session_id": SID,
    "model": "claude-test",
    "tools": ["Bash"],
    "cwd": ".",
}


def assistant(mid, *blocks, usage=None):
    message = {
        "id": mid,
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": list(blocks),
    }
    if usage:
        message["usage"] = usage
    return {"type": "assistant", "message": message, "parent_tool_use_id": None, "session_id": SID}


def tool_result(call_id, content, is_error=False):
    block = {"type": "tool_result", "tool_use_id": call_id, "content": content, "is_error": is_error}
    return {
        "type": "user",
        "message": {"role": "user", "content": [block]},
        "parent_tool_use_id": None,
        "session_id": SID,
    }


def result(subtype="success", is_error=False, text="All done."):
    return {
        "type": "result",
        "subtype": subtype,
        "is_error": is_error,
        "duration_ms": 1200,
        "duration_api_ms": 900,
        "num_turns": 2,
        "result": text,
        "session_id": SID,
        "total_cost_usd": 0.0123,
        "usage": {"input_tokens": 100, "output_tokens": 20},
    }


FULL_RUN = {
    "lines": [
        INIT,
        assistant("msg_1", {"type": "thinking", "thinking": "I should list the files.", "signature": "sig"}),
        assistant(
            "msg_1",
            {"type": "text", "text": "Let me look. "},
            {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}},
            usage={"input_tokens": 50, "output_tokens": 10},
        ),
        "this line is not JSON {",
        tool_result("toolu_1", [{"type": "text", "text": "a.txt\nb.txt"}]),
        assistant("msg_2", {"type": "text", "text": "There are two files."}),
        result(),
    ],
}


def _opts(**kw):
    return options("claude-code", agent_options=kw or None)


def test_claude_code_maps_messages_onto_parts(sandbox, fake_cli):
    fake_cli.play("claude", FULL_RUN)
    with bc.create_session(_opts(model="claude-test"), session_options(sandbox)) as session:
        turn = session.turn("What files are here?")
        parts = list(turn)
        assert session.state.data == {"session_id": SID}
    finish = parts[-1]
    assert finish.type == "turn-finish" and finish.finish_reason == "stop", finish
    assert finish.usage["total_cost_usd"] == 0.0123 and finish.usage["usage"]["output_tokens"] == 20
    assert [p.text for p in parts if p.type == "reasoning-delta"] == ["I should list the files."]
    assert turn.text() == "Let me look. There are two files."
    calls = [p for p in parts if isinstance(p, bc.ToolCall)]
    results = [p for p in parts if isinstance(p, bc.ToolResult)]
    assert [(c.tool_call_id, c.tool_name, c.input) for c in calls] == [("toolu_1", "Bash", {"command": "ls"})]
    assert [(r.tool_call_id, r.tool_name, r.output, r.is_error) for r in results] == [
        ("toolu_1", "Bash", "a.txt\nb.txt", False)
    ]
    # One step per model message: msg_1 (thinking, text, tool use and its result), msg_2.
    finishes = [p for p in parts if isinstance(p, bc.StepFinish)]
    assert [(p.step, p.finish_reason) for p in finishes] == [(0, "tool-calls"), (1, "stop")]
    assert finishes[0].usage == {"input_tokens": 50, "output_tokens": 10}
    assert calls[0].step == results[0].step == 0
    unparsed = [p for p in parts if isinstance(p, bc.Data)]
    assert [(p.name, p.data) for p in unparsed] == [
        ("claude-code-unparsed", {"line": "this line is not JSON {"})
    ]
    (call,) = fake_cli.calls("claude")
    argv = call["argv"]
    assert argv[:6] == ["-p", "--output-format", "stream-json", "--verbose", "--input-format", "stream-json"]
    assert "--resume" not in argv and argv[argv.index("--model") + 1] == "claude-test"
    assert "--permission-mode" not in argv, "a LocalSandbox keeps the CLI's own permission checks"
    message = json.loads(call["stdin"])
    assert message["type"] == "user" and message["message"] == {
        "role": "user",
        "content": "What files are here?",
    }


def test_c07_claude_code_resumes_its_session_in_later_turns_and_fresh_bridges(sandbox, fake_cli):
    fake_cli.play("claude", FULL_RUN)
    with bc.create_session(_opts(), session_options(sandbox)) as session:
        list(session.turn("first"))
        assert [p.finish_reason for p in session.turn("second") if p.type == "turn-finish"] == ["stop"]
        state = session.state
    # A new bridge (other options, so another bridge id) given the session state resumes too.
    with bc.create_session(_opts(model="other"), session_options(sandbox, resume=state)) as again:
        list(again.turn("third"))
    argvs = [c["argv"] for c in fake_cli.calls("claude")]
    assert "--resume" not in argvs[0]
    for argv in argvs[1:]:
        assert argv[argv.index("--resume") + 1] == SID


def test_claude_code_early_exit_without_result_is_an_error(sandbox, fake_cli):
    run = {
        "lines": [INIT, assistant("msg_1", {"type": "text", "text": "Starting"})],
        "exit": 3,
        "stderr": "Error: API connection lost",
    }
    fake_cli.play("claude", run)
    with bc.create_session(_opts(), session_options(sandbox)) as session:
        parts = list(session.turn("go"))
    finish = parts[-1]
    assert finish.finish_reason == "error"
    assert "status 3" in finish.error and "before its result message" in finish.error
    assert "API connection lost" in finish.error
    assert [p.type for p in parts].count("step-finish") == 1, "the open step is closed"


def test_claude_code_error_result_ends_the_turn_with_its_message(sandbox, fake_cli):
    fake_cli.play("claude", {"lines": [INIT, result("error_max_turns", True, "Reached max turns (1)")]})
    with bc.create_session(_opts(max_turns=1), session_options(sandbox)) as session:
        parts = list(session.turn("go"))
    assert parts[-1].finish_reason == "error" and "Reached max turns" in parts[-1].error
    assert "--max-turns" in fake_cli.calls("claude")[0]["argv"]


def test_claude_code_cancel_interrupts_the_cli(sandbox, fake_cli):
    fake_cli.play(
        "claude",
        {"lines": [INIT, assistant("msg_1", {"type": "text", "text": "Working..."})], "wait": "interrupt"},
    )
    with bc.create_session(_opts(), session_options(sandbox)) as session:
        turn = session.turn("a long task")
        parts = []
        for part in turn:
            parts.append(part)
            if part.type == "text-delta":
                turn.cancel()
    assert parts[-1].finish_reason == "cancelled"
    assert fake_cli.interrupts() == 1, "the interrupt control request reached the CLI"


def test_claude_code_missing_cli_is_a_clear_error(sandbox, fake_cli):
    with bc.create_session(_opts(executable="no-such-claude"), session_options(sandbox)) as session:
        parts = list(session.turn("go"))
    assert parts[-1].finish_reason == "error" and "no-such-claude" in parts[-1].error


def test_b05_claude_code_continues_after_a_restart_by_resuming_its_session(sandbox, fake_cli):
    first = {
        "lines": [
            INIT,
            assistant(
                "msg_1", {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "make"}}
            ),
            tool_result("toolu_1", "built"),
            assistant("msg_2", {"type": "text", "text": "Now testing"}),
        ],
        "wait": "eof",
    }
    second = {"lines": [INIT, assistant("msg_3", {"type": "text", "text": "Tests pass."}), result()]}
    fake_cli.play("claude", first, second)
    with bc.create_session(_opts(), session_options(sandbox)) as session:
        turn = session.turn("build and test")
        parts = []
        for part in turn:
            parts.append(part)
            if part.type == "text-delta" and part.text == "Now testing":
                first_pid = session._hello.pid
                os.kill(first_pid, signal.SIGKILL)
        assert session._hello.pid != first_pid
    assert parts[-1].finish_reason == "stop"
    resets = [p for p in parts if isinstance(p, bc.StepReset)]
    assert [(r.step, r.discarded_attempt) for r in resets] == [(1, 1)], "the unfinished step is discarded"
    assert [(p.step, p.attempt) for p in parts if p.type == "step-finish"] == [(0, 1), (1, 2)]
    assert turn.text() == "Tests pass."
    calls = fake_cli.calls("claude")
    assert len(calls) == 2
    assert calls[1]["argv"][calls[1]["argv"].index("--resume") + 1] == SID
    content = json.loads(calls[1]["stdin"])["message"]["content"]
    assert content.startswith(DEFAULT_CONTINUE_PROMPT) and "already ran to the end" in content


def test_claude_code_api_retries_are_data_parts(sandbox, fake_cli):
    # The CLI's `system` `api_retry` lines (a refused key, a wrong base URL) are the only
    # thing it prints for minutes: each is a `claude-code-retry` data part, its own fields.
    retry = {"type": "system", "subtype": "api_retry", "attempt": 1, "max_retries": 10,
             "retry_delay_ms": 616, "error_status": 401, "error": "authentication_failed",
             "session_id": SID, "uuid": "u-1"}
    fake_cli.play("claude", {"lines": [INIT, retry, result("error", True, "Invalid API key")]})
    with bc.create_session(_opts(), session_options(sandbox)) as session:
        parts = list(session.turn("go"))
    retries = [p for p in parts if isinstance(p, bc.Data) and p.name == "claude-code-retry"]
    assert [p.data for p in retries] == [{"attempt": 1, "max_retries": 10, "retry_delay_ms": 616,
                                          "error_status": 401, "error": "authentication_failed"}]
    assert parts[-1].finish_reason == "error" and "Invalid API key" in parts[-1].error

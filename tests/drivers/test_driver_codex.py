"""The ``codex`` driver through a real bridge and a real Session, against a fake ``codex``
first on PATH that prints recorded ``exec --json`` events (tests/drivers/fake_cli.py; the event
shapes follow openai/codex's codex-rs/exec/src/exec_events.rs)."""

from __future__ import annotations

import os
import signal

import pytest

import bridge_client as bc
from bridge_client.drivers.claude_code import DEFAULT_CONTINUE_PROMPT
from host_support import options, session_options

pytestmark = pytest.mark.timeout(60)

TID = "0199a213-81c0-7800-8aa1-bbab2a035a53"


def item(event, id, type, **fields):
    return {"type": f"item.{event}", "item": {"id": id, "type": type, **fields}}


FULL_RUN = {
    "lines": [
        {"type": "thread.started", "thread_id": TID},
        {"type": "turn.started"},
        item("completed", "item_0", "reasoning", text="**Looking at the tests**"),
        item(
            "started",
            "item_1",
            "command_execution",
            command="bash -lc 'pytest -q'",
            aggregated_output="",
            exit_code=None,
            status="in_progress",
        ),
        item(
            "completed",
            "item_1",
            "command_execution",
            command="bash -lc 'pytest -q'",
            aggregated_output="1 failed\n",
            exit_code=1,
            status="failed",
        ),
        "{not json",
        item(
            "completed",
            "item_2",
            "file_change",
            changes=[{"path": "src/app.py", "kind": "update"}],
            status="completed",
        ),
        item("started", "item_3", "todo_list", items=[{"text": "fix the test", "completed": False}]),
        item("completed", "item_4", "agent_message", text="Fixed the failing test."),
        {
            "type": "turn.completed",
            "usage": {"input_tokens": 1200, "cached_input_tokens": 200, "output_tokens": 345},
        },
    ]
}


def _opts(**kw):
    return options("codex", agent_options=kw or None)


def test_codex_maps_events_onto_parts(sandbox, fake_cli):
    fake_cli.play("codex", FULL_RUN)
    with bc.create_session(_opts(model="gpt-test"), session_options(sandbox)) as session:
        turn = session.turn("fix the tests")
        parts = list(turn)
        assert session.state.data == {"thread_id": TID}
    finish = parts[-1]
    assert finish.finish_reason == "stop"
    assert finish.usage == {"input_tokens": 1200, "cached_input_tokens": 200, "output_tokens": 345}
    assert [p.text for p in parts if p.type == "reasoning-delta"] == ["**Looking at the tests**"]
    assert turn.text() == "Fixed the failing test."
    calls = [(p.step, p.tool_call_id, p.tool_name, p.input) for p in parts if isinstance(p, bc.ToolCall)]
    assert calls == [
        (0, "item_1", "command_execution", {"command": "bash -lc 'pytest -q'"}),
        (1, "item_2", "file_change", {"changes": [{"path": "src/app.py", "kind": "update"}]}),
    ]
    results = [p for p in parts if isinstance(p, bc.ToolResult)]
    assert (
        results[0].output == {"exitCode": 1, "output": "1 failed\n", "status": "failed"}
        and results[0].is_error
    )
    assert not results[1].is_error
    # A step closes after each tool item; the final message is a step of its own.
    assert [(p.step, p.finish_reason) for p in parts if p.type == "step-finish"] == [
        (0, "tool-calls"),
        (1, "tool-calls"),
        (2, "stop"),
    ]
    data = [(p.name, p.data) for p in parts if isinstance(p, bc.Data)]
    assert ("codex-unparsed", {"line": "{not json"}) in data
    assert any(name == "codex-todo_list" for name, _ in data)
    (call,) = fake_cli.calls("codex")
    assert call["argv"][:2] == ["exec", "--json"] and call["argv"][-1] == "-"
    assert "--skip-git-repo-check" in call["argv"] and "resume" not in call["argv"]
    assert call["argv"][call["argv"].index("--sandbox") + 1] == "workspace-write"
    assert call["argv"][call["argv"].index("--model") + 1] == "gpt-test"
    assert call["stdin"] == "fix the tests", "the prompt goes on stdin"


def test_c07_codex_resumes_its_thread_in_later_turns_and_fresh_bridges(sandbox, fake_cli):
    fake_cli.play("codex", FULL_RUN)
    with bc.create_session(_opts(), session_options(sandbox)) as session:
        list(session.turn("first"))
        list(session.turn("second"))
        state = session.state
    with bc.create_session(_opts(sandbox=None), session_options(sandbox, resume=state)) as again:
        list(again.turn("third"))
    argvs = [c["argv"] for c in fake_cli.calls("codex")]
    assert "resume" not in argvs[0]
    assert [a[a.index("resume") :] for a in argvs[1:]] == [["resume", TID, "-"]] * 2
    assert "--sandbox" not in argvs[2], "sandbox=null leaves the CLI's default"


def test_codex_turn_failed_ends_the_turn_with_its_message(sandbox, fake_cli):
    fake_cli.play(
        "codex",
        {
            "lines": [
                {"type": "thread.started", "thread_id": TID},
                {"type": "turn.started"},
                {"type": "error", "message": "Reconnecting... 1/5"},
                {"type": "turn.failed", "error": {"message": "stream disconnected before completion"}},
            ],
            "exit": 1,
        },
    )
    with bc.create_session(_opts(), session_options(sandbox)) as session:
        parts = list(session.turn("go"))
    assert parts[-1].finish_reason == "error" and "stream disconnected" in parts[-1].error
    assert [(p.name, p.data) for p in parts if isinstance(p, bc.Data)] == [
        ("codex-error", {"message": "Reconnecting... 1/5"})
    ]


def test_codex_early_exit_is_an_error(sandbox, fake_cli):
    fake_cli.play(
        "codex",
        {
            "lines": [
                {"type": "thread.started", "thread_id": TID},
                item(
                    "started",
                    "item_1",
                    "command_execution",
                    command="sleep 100",
                    aggregated_output="",
                    exit_code=None,
                    status="in_progress",
                ),
            ],
            "exit": 2,
            "stderr": "thread 'main' panicked",
        },
    )
    with bc.create_session(_opts(), session_options(sandbox)) as session:
        parts = list(session.turn("go"))
    assert parts[-1].finish_reason == "error"
    assert "status 2" in parts[-1].error and "panicked" in parts[-1].error
    assert [p.type for p in parts].count("step-finish") == 1


def test_codex_cancel_interrupts_the_cli(sandbox, fake_cli):
    fake_cli.play(
        "codex",
        {
            "lines": [
                {"type": "thread.started", "thread_id": TID},
                item("completed", "item_0", "reasoning", text="thinking"),
            ],
            "wait": "signal",
        },
    )
    with bc.create_session(_opts(), session_options(sandbox)) as session:
        turn = session.turn("a long task")
        parts = []
        for part in turn:
            parts.append(part)
            if part.type == "reasoning-delta":
                turn.cancel()
    assert parts[-1].finish_reason == "cancelled"


def test_b05_codex_continues_after_a_restart_by_resuming_its_thread(sandbox, fake_cli):
    first = {
        "lines": [
            {"type": "thread.started", "thread_id": TID},
            item(
                "completed",
                "item_1",
                "command_execution",
                command="make",
                aggregated_output="ok",
                exit_code=0,
                status="completed",
            ),
            item("completed", "item_2", "reasoning", text="now the tests"),
        ],
        "wait": "signal",
    }
    second = {
        "lines": [
            item("completed", "item_3", "agent_message", text="All green."),
            {
                "type": "turn.completed",
                "usage": {"input_tokens": 1, "cached_input_tokens": 0, "output_tokens": 1},
            },
        ]
    }
    fake_cli.play("codex", first, second)
    with bc.create_session(_opts(), session_options(sandbox)) as session:
        turn = session.turn("build and test")
        parts = []
        for part in turn:
            parts.append(part)
            if part.type == "reasoning-delta":
                first_pid = session._hello.pid
                os.kill(first_pid, signal.SIGKILL)
    assert parts[-1].finish_reason == "stop"
    assert [(r.step, r.discarded_attempt) for r in parts if isinstance(r, bc.StepReset)] == [(1, 1)]
    assert turn.text() == "All green."
    calls = fake_cli.calls("codex")
    assert calls[1]["argv"][-3:] == ["resume", TID, "-"]
    assert calls[1]["stdin"].startswith(DEFAULT_CONTINUE_PROMPT)
    assert "already ran to the end" in calls[1]["stdin"], "the completed step's call is named"

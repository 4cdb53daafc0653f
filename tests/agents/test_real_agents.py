"""The real agent CLIs (npm, pinned in package-lock.json) through a real bridge and a real
Session, offline against the scripted model server (model_server.py): text arrives as text
parts, the tool call and its result as tool-call/tool-result parts, the command really runs in
the sandbox, a second turn continues the CLI's own conversation (its session id in the session
state, the earlier messages in the model's next request), and a bridge SIGKILLed in the middle
of a turn continues it by resuming the CLI (B05)."""

from __future__ import annotations

import json
import os
import signal

import pytest

import bridge_client as bc
from bridge_client.drivers.claude_code import DEFAULT_CONTINUE_PROMPT
from host_support import _pids_under, options, session_options, wait_until
from model_server import hang, shell_call, text, text_quoting_last_tool_output

pytestmark = pytest.mark.timeout(120)

DRIVERS = ["claude-code", "codex", "gemini", "qwen", "pi"]
STATE_KEY = {"codex": "thread_id"}  # the others: session_id


def _session(sandbox, cli, **kw):
    return bc.create_session(
        options(cli.driver, agent_options=cli.agent_options),
        session_options(sandbox, launch_timeout=60.0, resend_window=30.0, **kw),
    )


def _cli_processes(workspace, program):
    """Pids working in ``workspace`` whose command line names ``program``."""
    found = []
    for pid in _pids_under(workspace):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat") as f:
                zombie = f.read().split()[2] == "Z"
        except OSError:
            continue
        if not zombie and any(os.path.basename(a.decode(errors="replace")) in (program, f"{program}.exe")
                              or f"/{program}" in a.decode(errors="replace") for a in argv[:3]):
            found.append(pid)
    return found


WARM = ("claude-code", "qwen", "pi")
"""The drivers that keep their CLI's process between a session's turns."""


def _cli_groups(workspace, program):
    """The process groups of the CLI's processes: one per CLI run (Qwen Code is three)."""
    groups = set()
    for pid in _cli_processes(workspace, program):
        try:
            groups.add(os.getpgid(pid))
        except OSError:
            pass
    return groups


def _check_clean(model):
    assert model.errors == [], model.errors
    assert model.exhausted == [], [r.text()[:500] for r in model.exhausted]


@pytest.mark.parametrize("driver", DRIVERS)
def test_real_cli_runs_a_tool_and_continues_its_conversation(driver, real_cli, model, sandbox, workspace):
    cli = real_cli(driver)
    model.script(
        shell_call("echo hi > f.txt && echo wrote-it"),
        text_quoting_last_tool_output("Saw: "),
        text("Second answer", chunks=3),
    )
    with _session(sandbox, cli) as session:
        turn = session.turn("Write f.txt")
        parts = list(turn)
        assert parts[-1].type == "turn-finish" and parts[-1].finish_reason == "stop", parts[-1]
        assert "Saw: " in turn.text() and "wrote-it" in turn.text()
        assert any(p.type == "text-delta" for p in parts)
        calls = [p for p in parts if isinstance(p, bc.ToolCall)]
        results = [p for p in parts if isinstance(p, bc.ToolResult)]
        assert len(calls) == 1 and "echo hi > f.txt" in json.dumps(calls[0].input), calls
        assert [r.tool_call_id for r in results] == [calls[0].tool_call_id]
        assert "wrote-it" in json.dumps(results[0].output) and not results[0].is_error, results[0]
        with open(os.path.join(workspace, "f.txt")) as f:
            assert f.read() == "hi\n", "the command ran in the sandbox's workspace"
        first = session.state.data
        key = STATE_KEY.get(driver, "session_id")
        assert isinstance(first.get(key), str) and first[key], first

        second = session.turn("And now?")
        parts = list(second)
        assert parts[-1].finish_reason == "stop", parts[-1]
        assert second.text() == "Second answer"
        if driver != "codex":  # codex exec --json gives an agent message whole
            deltas = [p.text for p in parts if p.type == "text-delta"]
            assert len(deltas) >= 2, f"the text streams in deltas as the model writes it: {deltas}"
        assert session.state.data == first, "the same CLI session goes on"
    requests = model.agent_requests()
    assert len(requests) == 3
    later = requests[2].text()
    assert "Write f.txt" in later and "echo hi > f.txt" in later and "And now?" in later, (
        "the second turn's request carries the first turn's conversation"
    )
    _check_clean(model)


@pytest.mark.parametrize("driver", DRIVERS)
def test_b05_real_cli_continues_a_turn_after_its_bridge_is_sigkilled(
    driver, real_cli, model, sandbox, workspace
):
    cli = real_cli(driver)
    model.script(
        shell_call("echo one > a.txt && echo built"),
        hang(text("Now testing", chunks=1)),  # held open after its text: the turn is mid-step
        text("Tests pass.", chunks=2),
    )
    with _session(sandbox, cli) as session:
        turn = session.turn("Build, then test")
        parts = []
        killed = None
        for part in turn:
            parts.append(part)
            if killed is None and part.type == "text-delta" and "Now testing" in part.text:
                killed = session._hello.pid
                os.kill(killed, signal.SIGKILL)
        assert killed is not None and session._hello.pid != killed
        state = session.state.data
        program = os.path.basename(cli.agent_options["executable"])
        warm = 1 if driver in WARM else 0  # the resumed CLI stays for the next turn
        assert wait_until(lambda: len(_cli_groups(workspace, program)) <= warm, timeout=10), (
            "the CLI of the killed bridge was ended by the keeper, the resumed one exited or is warm"
        )
    assert wait_until(lambda: not _cli_processes(workspace, program), timeout=10), "ended at release"
    assert parts[-1].finish_reason == "stop", parts[-1]
    resets = [p for p in parts if isinstance(p, bc.StepReset)]
    assert [r.step for r in resets] == [1], "the unfinished step is discarded"
    assert turn.text().endswith("Tests pass.")
    assert os.path.exists(os.path.join(workspace, "a.txt"))
    requests = model.agent_requests()
    assert len(requests) == 3
    resumed = requests[2].text()
    assert "echo one > a.txt" in resumed, "the resumed CLI session holds the earlier work"
    assert DEFAULT_CONTINUE_PROMPT in resumed
    assert isinstance(state.get(STATE_KEY.get(driver, "session_id")), str)
    _check_clean(model)


def test_claude_code_on_a_local_sandbox_keeps_the_cli_permission_checks(real_cli, model, sandbox, workspace):
    cli = real_cli("claude-code")
    del cli.agent_options["permission_mode"]  # the default: no bypass on a LocalSandbox
    model.script(shell_call("echo hi > f.txt"), text_quoting_last_tool_output())
    with _session(sandbox, cli) as session:
        parts = list(session.turn("Write f.txt"))
    results = [p for p in parts if isinstance(p, bc.ToolResult)]
    assert len(results) == 1 and results[0].is_error, results
    assert not os.path.exists(os.path.join(workspace, "f.txt")), "claude's own check refused the command"


@pytest.mark.parametrize("driver", DRIVERS)
def test_real_cli_cancel_interrupts_the_cli(driver, real_cli, model, sandbox, workspace):
    cli = real_cli(driver)
    model.script(hang(text("Working on it", chunks=1)))
    with _session(sandbox, cli) as session:
        turn = session.turn("A long task")
        parts = []
        for part in turn:
            parts.append(part)
            if part.type == "text-delta" and "Working on it" in part.text:
                turn.cancel()
        assert parts[-1].finish_reason == "cancelled", parts[-1]
        program = os.path.basename(cli.agent_options["executable"])
        assert wait_until(lambda: not _cli_processes(workspace, program), timeout=10), "the CLI ended"

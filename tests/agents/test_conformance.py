"""The conformance suite: every named agent driver (claude-code, codex, gemini, qwen, pi;
opencode, copilot, codex-acp, cline, vibe on the ``acp`` driver; aider) runs its real CLI
through the same scenarios, through a real bridge and a real Session, offline against the
scripted model server (model_server.py):

- streamed text (C09); a shell tool call that writes a file in the sandbox's workspace (C02)
  with a variable of the session's environment (C19);
- with approvals on, an approved call runs, a denied one does not (C18);
- a message sent to a running turn reaches the model (C18);
- a cancel while the tool's command runs ends the turn and the command (C20);
- a bridge SIGKILLed in the middle of a turn: the turn goes on and the command that ran
  before the death is not run again (B05, C24);
- a host tool called through the CLI's MCP client runs once, in this process (C22);
- an export restored into a new local sandbox with a fresh HOME: the agent remembers (C23).

A feature a driver lacks is asserted to be refused with its typed error
(``ApprovalsUnsupported``, ``MessagesUnsupported``, ``ToolsUnsupported``); a scenario that
makes no sense for a driver (Aider has no shell tool) is recorded as not applicable. With
``BRIDGE_CLIENT_CONFORMANCE_JSON`` set, each outcome is recorded to that file, from which
``python -m tests.agents.conformance_matrix`` writes the matrix of docs/agents.md.

Run one CLI at a time: ``pytest tests/agents/test_conformance.py -n 0 -k "[vibe]"``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading

import pytest

import bridge_client as bc
from conformance_support import ACP_PRESETS, AGENTS, Agent, Cells, aider_edit, host_call, make_agent, shell
from host_support import _pids_under, bridge_killing_lookup, kill_all_under, wait_until
from model_server import Reply, Text, hang, text, text_quoting_last_tool_output

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "env"))
from env_support import bridge_pid, sigkill_bridge  # noqa: E402

pytestmark = pytest.mark.timeout(240)

COMMAND = "echo ran-$PROOF_VALUE > proof.txt && echo wrote-it"
"""The shell tool's command: ``PROOF_VALUE`` (42) is a variable of the session's environment."""
NO_APPROVALS = {"codex": "codex exec never asks", "gemini": "headless, it cannot ask",
                "pi": "pi has no permission checks", "aider": "its questions are terminal prompts"}
NO_MESSAGES = ("codex", "gemini", "qwen", "pi", "aider")
NO_HOST_TOOLS = {
    "pi": "pi has no MCP client", "aider": "Aider has no MCP client",
    "vibe": "vibe-acp offers MCP tools only behind its search_tool_functions tool",
}
NO_SHELL = {"aider": "Aider has no shell tool: the model's edit blocks are its only tool"}


def _programs(request):
    """``programs(driver)``: the installed program of ``driver`` (skipping the test, with the
    reason, when it cannot be installed)."""
    from cli_venvs import cline_program, py_program
    from more_clis import more_clis_prefix, program

    def find(driver):
        if driver in ("claude-code", "codex", "gemini", "qwen", "pi", "opencode"):
            prefix = request.getfixturevalue("agent_clis")
            names = {"claude-code": "claude"}
            return program(prefix, names.get(driver, driver))
        if driver in ("copilot", "codex-acp"):
            return program(more_clis_prefix(), driver)
        if driver == "cline":
            return cline_program()
        return py_program(driver, "vibe-acp" if driver == "vibe" else "aider")

    return find


@pytest.fixture
def conform(request, model, tmp_path, monkeypatch):
    """``conform(driver, *cells)``: ``(Agent, Cells)``, the driver's real CLI against
    ``model`` with a private HOME, and the matrix cells this test decides; a failed test
    records the cells it left undecided as failed."""
    made = []
    before = request.session.testsfailed
    programs = _programs(request)

    def make(driver, *keys, home="agent-home"):
        agent = make_agent(driver, model, str(tmp_path / home), programs, monkeypatch.setenv,
                           lambda: request.getfixturevalue("agent_clis"))
        cells = Cells(driver, list(keys))
        cells.version = agent.version
        made.append(cells)
        return agent, cells

    yield make
    for cells in made:
        cells.finish(request.session.testsfailed > before)


def _of(parts, kind):
    return [p for p in parts if p.type == kind]


def _allow(agent: Agent) -> None:
    """Without approvals, let an ACP preset's commands run (on a LocalSandbox its default
    policy refuses them)."""
    if agent.driver in ACP_PRESETS:
        agent.agent_options["permission"] = "allow"


def _check_clean(model):
    assert model.errors == [], model.errors


# ----------------------------------------------------------------------------- text, tool, env


@pytest.mark.parametrize("driver", AGENTS)
def test_c09_c02_c19_conformance_streams_text_and_its_tool_writes_a_file_with_the_session_variable(
    driver, conform, model, sandbox, workspace
):
    agent, cells = conform(driver, "text", "tool", "env")
    _allow(agent)
    first = aider_edit("proof.txt", "ran-42") if driver == "aider" else shell(COMMAND)
    quote = [] if driver == "aider" else [text_quoting_last_tool_output("Saw: ")]  # Aider: one answer a turn
    answer = "Aider prints its answer a line at a time.\nSecond answer streams" if driver == "aider" else (
        "Second answer streams")
    agent.script(model, first, *quote, text(answer, chunks=4))
    with agent.session(sandbox) as session:
        turn = session.turn("Write proof.txt")
        parts = list(turn)
        second = session.turn("And now?")
        second_parts = list(second)
    assert parts[-1].type == "turn-finish" and parts[-1].finish_reason == "stop", parts[-1]
    calls, results = _of(parts, "tool-call"), _of(parts, "tool-result")
    assert len(calls) == 1 and [r.tool_call_id for r in results] == [calls[0].tool_call_id], (calls, results)
    assert not results[0].is_error, results[0]
    with open(os.path.join(workspace, "proof.txt")) as f:
        written = f.read()
    if driver == "aider":
        assert calls[0].tool_name == "edit" and written == "ran-42\n", (calls, written)
        cells.passed("tool", "its edit block")
        cells.not_applicable("env", NO_SHELL["aider"])
    else:
        assert "proof.txt" in json.dumps(calls[0].input), calls
        assert "wrote-it" in json.dumps(results[0].output) and "Saw: " in turn.text(), results[0]
        assert written == "ran-42\n", "the command ran in the workspace, with the session's variable"
        cells.passed("tool")
        cells.passed("env")
    assert second_parts[-1].finish_reason == "stop", second_parts[-1]
    assert second.text().rstrip().endswith("Second answer streams"), second.text()
    deltas = _of(second_parts, "text-delta")
    if driver == "codex":  # codex exec --json gives an agent message whole
        assert len(deltas) >= 1
        cells.passed("text", "one delta: codex exec gives a message whole")
    else:
        assert len(deltas) >= 2, f"the text streams in deltas as the model writes it: {deltas}"
        cells.passed("text")
    _check_clean(model)


# ----------------------------------------------------------------------------- approvals


@pytest.mark.parametrize("driver", AGENTS)
def test_c18_conformance_an_approved_call_runs_and_a_denied_one_does_not(
    driver, conform, model, sandbox, workspace
):
    agent, cells = conform(driver, "approve", "deny")
    if driver in NO_APPROVALS:
        with pytest.raises(bc.ApprovalsUnsupported, match=driver):
            with agent.session(sandbox, approvals=True) as session:
                list(session.turn("Anything"))
        cells.unsupported("approve", bc.ApprovalsUnsupported, NO_APPROVALS[driver])
        cells.unsupported("deny", bc.ApprovalsUnsupported, NO_APPROVALS[driver])
        return
    agent.script(
        model,
        shell("echo a > a.txt && echo wrote-a"), text_quoting_last_tool_output("Saw: "),
        shell("echo b > b.txt && echo wrote-b"), text_quoting_last_tool_output("Then: "),
    )

    def answer(turn, allow):
        parts = []
        for part in turn:
            parts.append(part)
            if part.type == "approval-request":
                turn.approve(part) if allow else turn.deny(part, message="not that")
        return parts

    with agent.session(sandbox, approvals=True) as session:
        approved = answer(session.turn("Write a.txt"), True)
        assert approved[-1].finish_reason == "stop", approved[-1]
        assert len(_of(approved, "approval-request")) == 1, _of(approved, "approval-request")
        assert [a.decision for a in _of(approved, "approval-answer")] == ["allow-once"]
        with open(os.path.join(workspace, "a.txt")) as f:
            assert f.read() == "a\n", "the approved command ran"
        cells.passed("approve")
        denied = answer(session.turn("Write b.txt"), False)
    assert denied[-1].type == "turn-finish", denied[-1]
    assert [a.decision for a in _of(denied, "approval-answer")] == ["deny"], _of(denied, "approval-answer")
    assert not os.path.exists(os.path.join(workspace, "b.txt")), "the denied command did not run"
    reason = denied[-1].finish_reason
    cells.passed("deny", "" if reason == "stop" else f"the CLI then ends the turn: {reason}")
    _check_clean(model)


# ----------------------------------------------------------------------------- steering


@pytest.mark.parametrize("driver", AGENTS)
def test_c18_conformance_a_message_to_a_running_turn_reaches_the_model(driver, conform, model, sandbox):
    agent, cells = conform(driver, "steer")
    if driver in NO_MESSAGES:
        agent.script(model, text("Fine."))
        with agent.session(sandbox) as session:
            turn = session.turn("Say something")
            with pytest.raises(bc.MessagesUnsupported):
                turn.say("and this")
            assert list(turn)[-1].finish_reason == "stop"
        cells.unsupported("steer", bc.MessagesUnsupported)
        return
    agent.script(model, hang(text("Working on it", chunks=1)), text("Noted the message", chunks=2))
    with agent.session(sandbox) as session:
        turn = session.turn("A task")
        parts = []
        reader = threading.Thread(target=lambda: parts.extend(turn), daemon=True)
        reader.start()
        assert model.hanging.wait(90), "the first answer is held open"
        turn.say("Also mention the message")
        taken = ("user-message", "data")
        assert wait_until(lambda: any(p.type in taken and (p.type == "user-message" or "message" in p.name)
                                      for p in list(parts)), timeout=30), [p.type for p in parts]
        model.release()
        reader.join(120)
        assert not reader.is_alive()
    assert parts[-1].finish_reason == "stop", parts[-1]
    assert turn.text().endswith("Noted the message"), turn.text()
    requests = model.agent_requests()
    assert "Also mention the message" in requests[-1].text(), "the model's next request carries it"
    assert "Also mention the message" not in requests[0].text()
    how = "the next prompt of the same turn (ACP)" if driver in ACP_PRESETS else ""
    cells.passed("steer", how)
    _check_clean(model)


# ----------------------------------------------------------------------------- cancel


def _sleepers(workspace):
    """Processes in the workspace running the test's ``sleep``."""
    found = []
    for pid in _pids_under(workspace):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split()[2] == "Z":
                    continue
        except OSError:
            continue
        if argv[:2] == [b"sleep", b"20"]:
            found.append(pid)
    return found


@pytest.mark.parametrize("driver", AGENTS)
def test_c20_conformance_cancel_while_a_tool_runs_ends_the_turn_and_the_command(
    driver, conform, model, sandbox, workspace
):
    agent, cells = conform(driver, "cancel")
    if driver in NO_SHELL:
        cells.not_applicable("cancel", NO_SHELL[driver] + " (its cancel while the model answers: "
                             "test_real_aider_cancel_ends_the_turn_and_the_session_goes_on)")
        pytest.skip(NO_SHELL[driver])
    _allow(agent)
    started = os.path.join(workspace, "started")
    agent.script(model, shell("touch started; sleep 20; echo late > late.txt"), text("unused"))
    with agent.session(sandbox) as session:
        turn = session.turn("A long command")
        parts = []
        for part in turn:
            parts.append(part)
            if part.type == "tool-call":
                assert wait_until(lambda: os.path.exists(started), timeout=30), "the command started"
                assert wait_until(lambda: _sleepers(workspace), timeout=10), "its sleep runs"
                turn.cancel()
        assert parts[-1].finish_reason == "cancelled", parts[-1]
        assert wait_until(lambda: not _sleepers(workspace), timeout=20), "the cancelled command ended"
    assert not os.path.exists(os.path.join(workspace, "late.txt"))
    cells.passed("cancel")


# ----------------------------------------------------------------------------- bridge SIGKILL

MARK = "appended-42"  # what the command prints (printf): not in the command's text
APPEND = "echo x >> out.txt; printf 'appended-%s\\n' 42"


def _like_a_model(hold=None):
    """Calls the shell tool with APPEND unless the request holds its result (then it answers,
    in two text blocks: held after the first with ``hold``)."""
    call = shell(APPEND)

    def build(request):
        if MARK in request.text():  # the tool's result, or the driver's word that it ran
            return [Text("partial answer ", 1), Text("the line is there", 1)]
        return call.blocks(request)

    return Reply(build, hold=hold)


def _lines(workspace):
    path = os.path.join(workspace, "out.txt")
    return open(path).read().splitlines() if os.path.exists(path) else []


@pytest.mark.parametrize("driver", AGENTS)
def test_b05_c24_conformance_a_turn_goes_on_after_a_bridge_sigkill_and_its_tool_ran_once(
    driver, conform, model, sandbox, workspace
):
    """The bridge dies while the model streams its answer to the tool's result (step 1,
    held after its first text): the next bridge continues the turn; the model, asked without
    the tool's result, would call it again, so ``out.txt`` tells how often it ran."""
    agent, cells = conform(driver, "sigkill")
    _allow(agent)
    agent.agent_options["continue_prompt"] = "Go on please."
    if driver == "aider":
        return _aider_sigkill(agent, cells, model, sandbox, workspace)
    agent.script(model, _like_a_model(), _like_a_model(hold=1), *[_like_a_model()] * 4)
    with agent.session(sandbox) as session:
        turn = session.turn("Append the line to out.txt, please.")
        parts = []
        killed = None
        for part in turn:
            parts.append(part)
            if killed is None and part.type == "text-delta" and "partial" in part.text:
                assert model.hanging.wait(30), "the answer is held open"
                killed = sigkill_bridge(sandbox, session.bridge_id)
                model.release()
        assert killed is not None, [p.type for p in parts]
        assert bridge_pid(sandbox, session.bridge_id) not in (None, killed), "the turn went on elsewhere"
        wait_until(lambda: len(_lines(workspace)) >= 2, timeout=2)  # a second run's line
    assert parts[-1].finish_reason == "stop", parts[-1]
    assert _of(parts, "step-reset"), "the unfinished step was discarded"
    assert _lines(workspace) == ["x"], f"the tool ran {len(_lines(workspace))} times"
    assert turn.text().endswith("the line is there"), turn.text()
    lost = [p.data for p in _of(parts, "data") if p.name == "acp-session-lost"]
    cells.passed("sigkill", "the ACP session was lost: a new one was told what ran" if lost else "")
    _check_clean(model)


def _aider_sigkill(agent, cells, model, sandbox, workspace):
    """Aider: the bridge dies while Aider waits for the model's answer; the next run of the
    turn gets the edit block; the file holds its line once."""
    asked, gate = [], threading.Event()

    def reply(request):  # in the server's thread: the first answer waits for the gate
        asked.append(request)
        if len(asked) == 1:
            gate.wait(60)
            return [Text("late", 1)]
        return aider_edit("out.txt", "x").blocks(request)

    model.side_reply = reply
    try:
        with agent.session(sandbox) as session:
            turn = session.turn("Append the line to out.txt, please.")
            parts = []
            reader = threading.Thread(target=lambda: parts.extend(turn), daemon=True)
            reader.start()
            assert wait_until(lambda: len(asked) >= 1, timeout=90), "Aider asked the model"
            killed = sigkill_bridge(sandbox, session.bridge_id)
            gate.set()
            reader.join(120)
            assert not reader.is_alive()
            assert bridge_pid(sandbox, session.bridge_id) not in (None, killed)
    finally:
        gate.set()
    assert parts[-1].finish_reason == "stop", parts[-1]
    assert _lines(workspace) == ["x"], _lines(workspace)
    assert [c.tool_name for c in _of(parts, "tool-call")] == ["edit"]
    cells.passed("sigkill", "killed while Aider waits for the model; its edit applied once")


# ----------------------------------------------------------------------------- host tools


@pytest.mark.parametrize("driver", AGENTS)
def test_c22_conformance_a_host_tool_runs_once_in_this_process(driver, conform, model, sandbox):
    agent, cells = conform(driver, "host-tool")
    calls = []

    def lookup(key: str) -> dict:
        """Look a key up in the application's table.

        Args:
            key: the key to look up.
        """
        calls.append(key)
        return {"key": key, "value": 42}

    if driver in NO_HOST_TOOLS:
        with pytest.raises(bc.ToolsUnsupported, match=f"the {driver} agent cannot call host tools"):
            with agent.session(sandbox, tools=[lookup]) as session:
                list(session.turn("Look alpha up"))
        cells.unsupported("host-tool", bc.ToolsUnsupported, NO_HOST_TOOLS[driver])
        return
    agent.script(model, host_call("lookup", {"key": "alpha"}, driver), text_quoting_last_tool_output("Got: "))
    with agent.session(sandbox, tools=[lookup]) as session:
        turn = session.turn("Look alpha up")
        parts = list(turn)
    assert turn.finish.finish_reason == "stop", turn.finish
    assert calls == ["alpha"], "once, in this process"
    (result,) = [p for p in parts if isinstance(p, bc.HostToolResult)]
    assert (result.output, result.is_error) == ({"key": "alpha", "value": 42}, False), result
    assert "42" in model.agent_requests()[1].tool_outputs()[-1]
    assert "Got: " in turn.text() and "42" in turn.text(), turn.text()
    named = [p.tool_name for p in parts if isinstance(p, bc.ToolCall) and "lookup" in p.tool_name]
    cells.passed("host-tool", f"called as {named[0]}" if named else "")
    _check_clean(model)


@pytest.mark.parametrize("driver", ["opencode", "copilot", "codex-acp", "cline"])
def test_c22_conformance_a_bridge_sigkill_mid_host_call_still_runs_it_once(driver, conform, model, sandbox):
    """The ACP presets with host tools: the bridge dies while the host function runs; the
    relaunched bridge starts the agent again, whose model calls the tool again, and gets the
    recorded result, not a second run."""
    agent, _ = conform(driver)
    lookup, calls, holder = bridge_killing_lookup()

    call = host_call("lookup", {"key": "alpha"}, driver)
    agent.script(model, call, call, text_quoting_last_tool_output("Got: "))
    with agent.session(sandbox, tools=[lookup]) as session:
        holder["session"] = session
        first, parts = None, []
        turn = session.turn("Look alpha up")
        for part in turn:
            parts.append(part)
            first = first or session._hello.pid
        assert session._hello.pid != first, "the bridge was launched again"
    assert turn.finish.finish_reason == "stop", turn.finish
    assert calls == ["alpha"], "the function ran once across the bridge's death"
    results = [p for p in parts if isinstance(p, bc.HostToolResult)]
    assert [r.output for r in results] == [{"key": "alpha", "value": 7}], "one recorded result"
    seen = [out for request in model.agent_requests() for out in request.tool_outputs()]
    assert any("7" in out for out in seen), "the model was given the recorded result"


# ----------------------------------------------------------------------------- restore


@pytest.fixture
def other_workspace(tmp_path, home):
    folder = tmp_path / "other-workspace"
    folder.mkdir()
    yield str(folder)
    kill_all_under(str(folder))


_ACP_LOST = "the ACP agent's session stays in its old HOME: the restored session starts a new one"
NOT_CARRIED = {
    "gemini": ("its chats are kept under a project name it assigns; the restored turn ends with "
               "an error (no previous sessions for this project)", "error"),
    **{d: (_ACP_LOST, "stop") for d in ACP_PRESETS},
    "aider": ("its chat history is kept in the old bridge's state directory: the restored "
              "session starts a new one", "stop"),
}
"""The drivers whose export does not carry the agent's memory yet: why, and the restored
turn's finish reason."""


@pytest.mark.parametrize("driver", AGENTS)
def test_c23_conformance_restored_into_a_new_sandbox_the_agent_remembers(
    driver, conform, model, sandbox, workspace, other_workspace, tmp_path
):
    """Turn 1 in one sandbox; the sandbox lost (its bridge SIGKILLed and its processes
    killed, its bridge's store removed) and the CLI's HOME with it; the export restored into
    another sandbox whose agent has a fresh HOME: turn 2's model request holds turn 1."""
    agent, cells = conform(driver, "restore")
    agent.script(model, text("The answer is 42.", chunks=2), text("You asked about 42.", chunks=2))
    out = str(tmp_path / "chat.export")
    with agent.session(sandbox) as session:
        first = session.turn("What is the answer to everything?")
        assert list(first)[-1].finish_reason == "stop"
        session.export(out)
    kill_all_under(workspace, grace=0.0)
    shutil.rmtree(sandbox._state_root)
    shutil.rmtree(agent.home)
    fresh, _ = conform(driver, home="new-agent-home")  # the new sandbox's own HOME
    other = bc.LocalSandbox(other_workspace)
    with bc.restore_session(out, fresh.session_options(other), fresh.bridge_options()) as restored:
        second = restored.turn("What did I ask you?")
        parts = list(second)
    later = model.agent_requests()[-1].text() if driver != "aider" else model.requests[-1].text()
    if driver in NOT_CARRIED:
        why, reason = NOT_CARRIED[driver]
        assert parts[-1].finish_reason == reason, parts[-1]
        if reason == "stop":
            assert "What did I ask you?" in later
        assert "The answer is 42." not in later, "it remembers now: move it out of NOT_CARRIED"
        cells.not_carried("restore", why)
        return
    assert parts[-1].finish_reason == "stop", parts[-1]
    assert second.text().rstrip().endswith("You asked about 42."), second.text()
    assert "What did I ask you?" in later
    assert "What is the answer to everything?" in later and "The answer is 42." in later, (
        "the restored agent remembers turn 1: " + later[:1500]
    )
    cells.passed("restore", "the export carries the CLI's transcript")

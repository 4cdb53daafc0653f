"""The ``acp`` driver against an ACP agent of our own (acp_agent.py, a real process speaking
JSON-RPC on its stdio), through real bridges and Sessions: session updates as parts, the ACP
session id in the session state, a second turn in the same ACP session, permissions by
policy, the client fs methods, cancel, an agent that fails, ``session/load`` after a restart,
a turn continued after its bridge was SIGKILLed (B05), and the session's environment (C19)."""
from __future__ import annotations

import os
import re
import time

import pytest

import bridge_client as bc
from env_support import bridge_pid, sigkill_bridge
from host_support import _alive, session_options, wait_until

pytestmark = pytest.mark.timeout(60)


def _run(session, prompt):
    turn = session.turn(prompt)
    parts = list(turn)
    assert parts[-1].type == "turn-finish", parts[-1]
    return turn, parts


def _of(parts, kind):
    return [p for p in parts if p.type == kind]


def _data(parts, name):
    return [p.data for p in parts if p.type == "data" and p.name == name]


def _said(turn, name):
    match = re.search(rf"{name}=(\S+)", turn.text())
    assert match, turn.text()
    return match.group(1)


def test_acp_updates_map_to_parts_and_the_session_id_is_in_the_state(sandbox, workspace, acp_options):
    prompt = "\n".join(
        [
            "plan look; build",
            "think let me see",
            "say hello world",
            "run echo made > made.txt; echo out",
            "say done",
        ]
    )
    with bc.create_session(acp_options(), session_options(sandbox)) as session:
        turn, parts = _run(session, prompt)
        state = session.state
    assert parts[-1].finish_reason == "stop", parts[-1]
    assert _data(parts, "acp-plan") == [
        [{"content": "look", "priority": "medium", "status": "pending"},
         {"content": "build", "priority": "medium", "status": "pending"}]
    ]
    assert "".join(p.text for p in _of(parts, "reasoning-delta")) == "let me see"
    assert turn.text() == "hello worlddone"
    (call,) = _of(parts, "tool-call")
    assert (call.tool_name, call.input) == ("execute", {"command": "echo made > made.txt; echo out"})
    (result,) = _of(parts, "tool-result")
    assert (result.tool_call_id, result.output, result.is_error) == (call.tool_call_id, "out", False)
    assert open(os.path.join(workspace, "made.txt")).read() == "made\n", "the command ran in the sandbox"
    # One step per model call: the thought, text and tool call, then the text after the result.
    assert [(p.step, p.finish_reason) for p in _of(parts, "step-finish")] == [(0, "tool-calls"), (1, "stop")]
    assert call.step == 0 and result.step == 0
    assert [p.text for p in _of(parts, "text-delta") if p.step == 1] != []
    acp_id = state.data["acp_session_id"]
    assert acp_id.startswith("sess-") and os.path.exists(os.path.join(acp_options.store, f"{acp_id}.json"))


def test_acp_second_turn_continues_the_same_acp_session(sandbox, acp_options):
    with bc.create_session(acp_options(), session_options(sandbox)) as session:
        first, _ = _run(session, "say one\npid")
        acp_id = session.state.data["acp_session_id"]
        second, parts = _run(session, "count\npid")
        assert session.state.data["acp_session_id"] == acp_id
    assert _said(second, "prompts") == "2", "the second prompt went to the same ACP session"
    assert _said(first, "pid") == _said(second, "pid"), "one agent process serves the session's turns"
    assert not _of(parts, "session-state"), "the state did not change"


@pytest.mark.parametrize("policy, allowed", [(None, False), ("allow", True), ("allow_always", True)])
def test_acp_permission_requests_are_answered_by_the_policy(sandbox, workspace, acp_options, policy, allowed):
    extra = {"permission": policy} if policy else {}
    with bc.create_session(acp_options("--ask", **extra), session_options(sandbox)) as session:
        _, parts = _run(session, "run echo x > ran.txt")
    (asked,) = _data(parts, "acp-permission")
    want = {None: "no", "allow": "yes", "allow_always": "yes-always"}[policy]
    assert asked["outcome"] == {"outcome": "selected", "optionId": want}
    assert asked["policy"] == (policy or "reject") and asked["title"] == "`echo x > ran.txt`"
    (call,) = _of(parts, "tool-call")
    (result,) = _of(parts, "tool-result")
    assert asked["toolCallId"] == call.tool_call_id
    assert parts.index(call) < parts.index(result), "the call is out before the answer's result"
    assert result.is_error is (not allowed)
    assert os.path.exists(os.path.join(workspace, "ran.txt")) is allowed


def test_acp_client_fs_methods_read_and_write_in_the_workspace(sandbox, workspace, acp_options):
    with bc.create_session(acp_options(), session_options(sandbox)) as session:
        turn, parts = _run(session, "write notes/a.txt :: hi there\nread notes/a.txt")
    assert parts[-1].finish_reason == "stop"
    assert open(os.path.join(workspace, "notes", "a.txt")).read() == "hi there"
    assert [p.tool_name for p in _of(parts, "tool-call")] == ["edit", "read"]
    assert [p.is_error for p in _of(parts, "tool-result")] == [False, False]
    assert turn.text() == "read: hi there"
    assert not [n for n in os.listdir(os.path.join(workspace, "notes")) if n.startswith(".acp-write-")]


def test_acp_fs_off_advertises_no_fs_methods(sandbox, workspace, acp_options):
    with bc.create_session(acp_options(fs=False), session_options(sandbox)) as session:
        _, parts = _run(session, "write a.txt :: x")
    (result,) = _of(parts, "tool-result")
    assert result.is_error and "the client has no fs/write_text_file" in result.output
    assert not os.path.exists(os.path.join(workspace, "a.txt"))


def test_acp_cancel_sends_session_cancel(sandbox, acp_options):
    with bc.create_session(acp_options(), session_options(sandbox)) as session:
        turn = session.turn("hold\npid")
        parts = []
        started = None
        for part in turn:
            parts.append(part)
            if part.type == "reasoning-delta" and started is None:
                started = time.monotonic()
                session.cancel_turn()
        took = time.monotonic() - started
        after, _ = _run(session, "count\npid")
    assert parts[-1].finish_reason == "cancelled"
    assert took < 1.5, f"the agent answered the cancel in {took:.2f} s"
    assert _said(after, "prompts") == "2", "the agent kept its session after a cancel it answered"


def test_acp_agent_that_ignores_cancel_is_killed_after_the_grace(sandbox, acp_options):
    opts = acp_options("--ignore-cancel", interrupt_grace=0.5)
    with bc.create_session(opts, session_options(sandbox)) as session:
        first, _ = _run(session, "pid")
        turn = session.turn("hold")
        parts = []
        for part in turn:
            parts.append(part)
            if part.type == "reasoning-delta" and len(_of(parts, "reasoning-delta")) == 1:
                session.cancel_turn()
        old = int(_said(first, "pid"))
        assert wait_until(lambda: not _alive(old), timeout=5), "the agent's process group was killed"
        after, after_parts = _run(session, "count\npid")
    assert parts[-1].finish_reason == "cancelled"
    assert _said(after, "pid") != str(old), "a new agent process"
    assert _said(after, "prompts") == "3", "it loaded the session (session/load)"
    assert not _data(after_parts, "acp-session-lost")


def test_acp_agent_failures_end_the_turn_with_an_error(sandbox, acp_options):
    with bc.create_session(acp_options(), session_options(sandbox)) as session:
        _, crashed = _run(session, "say before\ncrash")
        _, errored = _run(session, "error boom from the agent")
        _, refused = _run(session, "stop refusal")
        _, limited = _run(session, "stop max_turn_requests")
        recovered, _ = _run(session, "say still here")
    assert crashed[-1].finish_reason == "error"
    assert "status 3" in crashed[-1].error and "crashing as asked" in crashed[-1].error, crashed[-1].error
    assert errored[-1].finish_reason == "error" and "boom from the agent" in errored[-1].error
    assert refused[-1].finish_reason == "error" and "refusal" in refused[-1].error
    assert limited[-1].finish_reason == "max-steps"
    assert recovered.text() == "still here"


def test_acp_bad_setup_is_a_clear_error(sandbox, acp_options):
    with pytest.raises(ValueError, match="'command' is required"):
        bc.bridge_options("acp")
    with pytest.raises(ValueError, match="permission"):
        bc.bridge_options("acp", agent_options={"command": "x", "permission": "always"})
    missing = acp_options(command="/nonexistent/acp-agent", args=[])
    with bc.create_session(missing, session_options(sandbox)) as session:
        _, parts = _run(session, "hi")
    assert parts[-1].finish_reason == "error" and "cannot start the ACP agent" in parts[-1].error
    with bc.create_session(acp_options("--protocol", "2"), session_options(sandbox)) as session:
        _, parts = _run(session, "hi")
    assert "protocol version 2" in parts[-1].error, parts[-1].error


@pytest.mark.parametrize("load", [True, False], ids=["session-load", "no-load-capability"])
def test_acp_session_after_a_bridge_restart(sandbox, acp_options, load):
    opts = acp_options() if load else acp_options("--no-load")
    with bc.create_session(opts, session_options(sandbox)) as session:
        first, _ = _run(session, "say hi\npid")
        acp_id = session.state.data["acp_session_id"]
        sigkill_bridge(sandbox, session.bridge_id)
        old = int(_said(first, "pid"))
        assert wait_until(lambda: not _alive(old), timeout=5), "the keeper killed the dead bridge's agent"
        second, parts = _run(session, "count")
        new_id = session.state.data["acp_session_id"]
    if load:
        assert _said(second, "prompts") == "2" and new_id == acp_id
        assert not _data(parts, "acp-session-lost")
    else:
        assert _said(second, "prompts") == "1" and new_id != acp_id
        (lost,) = _data(parts, "acp-session-lost")
        assert lost["sessionId"] == acp_id and "loadSession" in lost["reason"]


def test_b05_acp_turn_continues_after_its_bridge_is_sigkilled(sandbox, workspace, acp_options):
    """The bridge dies in step 1; the new bridge starts the agent again, loads the ACP session
    and continues the turn with the continue prompt: step 1 runs again, step 0 does not."""
    prompt = "say one\nrun echo ran >> log.txt\nwait gate\nsay two"
    with bc.create_session(acp_options(continue_prompt="go on"), session_options(sandbox)) as session:
        turn = session.turn(prompt)
        parts = []
        killed = None
        for part in turn:
            parts.append(part)
            if killed is None and part.type == "reasoning-delta":
                killed = sigkill_bridge(sandbox, session.bridge_id)
                open(os.path.join(workspace, "gate"), "w").close()
        assert bridge_pid(sandbox, session.bridge_id) not in (None, killed)
        after, _ = _run(session, "count")
    assert parts[-1].finish_reason == "stop", parts[-1]
    resets = _of(parts, "step-reset")
    assert [(r.step, r.discarded_attempt) for r in resets] == [(1, 1)], "only the cut step runs again"
    assert [(p.step, p.attempt) for p in _of(parts, "step-start")] == [(0, 1), (1, 1), (1, 2)]
    assert open(os.path.join(workspace, "log.txt")).read() == "ran\n", "the completed step's command ran once"
    assert turn.text().endswith("two") and turn.text().startswith("one"), turn.text()
    assert _said(after, "prompts") == "3", "prompt, continue prompt, then this one: one ACP session"


def test_c19_acp_agent_sees_its_sessions_env(sandbox, acp_options):
    opts = acp_options()
    a = bc.create_session(opts, session_options(sandbox, env={"WHO": "alpha"}))
    b = bc.create_session(opts, session_options(sandbox, env={"WHO": bc.Redacted("beta")}))
    try:
        ta, _ = _run(a, "env WHO")
        tb, _ = _run(b, "env WHO")
        assert a.instance == b.instance, "one bridge"
        assert (ta.text(), tb.text()) == ("WHO=alpha\n", "WHO=beta\n")
    finally:
        a.release()
        b.release()
    # The same session with another env (a new connection): its agent starts again with it,
    # in the same ACP session.
    again = bc.create_session(
        opts, session_options(sandbox, resume=a.state, env={"WHO": "gamma"})
    )
    with again:
        turn, _ = _run(again, "env WHO\ncount")
    assert turn.text() == "WHO=gamma\nprompts=2\n"


def test_b09_acp_agent_process_stops_when_its_session_is_closed(sandbox, acp_options):
    session = bc.create_session(acp_options(), session_options(sandbox))
    try:
        first, _ = _run(session, "pid")
        pid = int(_said(first, "pid"))
        assert _alive(pid)
    finally:
        session.release()  # CloseSession
    assert wait_until(lambda: not _alive(pid), timeout=5), "the closed session's agent process was stopped"
    with bc.create_session(acp_options(), session_options(sandbox)) as other:
        again, _ = _run(other, "pid")
    assert _said(again, "pid") != str(pid), "another session gets an agent of its own"


def test_b09_acp_agent_of_a_session_closed_mid_turn_stops_after_the_turn(sandbox, acp_options):
    from bridge_client.wire import rpcs

    with bc.create_session(acp_options(), session_options(sandbox)) as session:
        first, _ = _run(session, "pid")
        pid = int(_said(first, "pid"))
        turn = session.turn("hold")
        for part in turn:
            if part.type == "reasoning-delta":  # "holding": the agent is in its prompt
                break
        session._call(rpcs.CLOSE_SESSION, {"sessionId": session.id})
        time.sleep(0.3)  # a stop would be at once; the running turn keeps its agent
        assert _alive(pid), "the running turn's agent was stopped under it"
        session.cancel_turn()
        assert list(turn)[-1].finish_reason == "cancelled"
        assert wait_until(lambda: not _alive(pid), timeout=5), "stopped once the turn ended"


@pytest.mark.parametrize("late", [False, True], ids=["replay-before-answer", "replay-after-answer"])
def test_acp_replayed_history_is_not_shown_after_a_bridge_restart(sandbox, acp_options, late):
    """An agent that replays its history in ``session/load`` (before its answer, or after it
    as the Gemini CLI does): the turn after a bridge SIGKILL shows only its own output."""
    opts = acp_options("--late-replay") if late else acp_options()
    with bc.create_session(opts, session_options(sandbox)) as session:
        _run(session, "say earlier words\nrun echo earlier-run")
        sigkill_bridge(sandbox, session.bridge_id)
        second, parts = _run(session, "count")
    assert second.text() == "prompts=2\n", f"the replayed history was shown: {second.text()!r}"
    assert not _of(parts, "tool-call"), "the replayed tool call was shown"
    assert not _data(parts, "acp-session-lost")

"""Approvals with the shell driver (C18): the agent asks before each command and waits; the
host allows or denies; answers are idempotent by request id; a conflicting answer names the
first; the approval timeout denies; a cancel ends the wait; allow-always is remembered per
session and tool name, also after the bridge restarts; approvals off is the behaviour of
before; a driver that cannot ask is refused."""
from __future__ import annotations

import os

import pytest

import bridge_client as bc
from host_support import options, session_options
from interactive_support import lines, next_request, of_type, shell_session
from resilience_support import sigkill_bridge

pytestmark = pytest.mark.timeout(90)


def test_c18_approve_runs_the_command_and_the_log_says_who_decided(sandbox, workspace):
    out = os.path.join(workspace, "out")
    with shell_session(sandbox) as session:
        turn = session.turn(f"echo ran >> {out}")
        seen = []
        request = next_request(turn, seen)
        assert request.tool_name == "shell" and request.input == {"command": f"echo ran >> {out}"}
        assert request.title == f"shell: echo ran >> {out}"
        assert request.choices == ("allow-once", "allow-always", "deny")
        assert turn.pending_approvals == [request]
        assert lines(out) is None  # nothing ran before the answer
        recorded = turn.approve(request)
        assert recorded == (request.request_id, "allow-once", None, "host") and recorded.allowed
        seen.extend(turn)
    assert lines(out) == ["ran"]
    answers = of_type(seen, bc.ApprovalAnswer)
    assert [(a.request_id, a.decision, a.by) for a in answers] == [(request.request_id, "allow-once", "host")]
    types = [p.type for p in seen]
    assert types.index("tool-call") < types.index("approval-request") < types.index("approval-answer")
    assert types.index("approval-answer") < types.index("tool-result")
    assert turn.pending_approvals == [] and turn.finish.finish_reason == "stop"


def test_c18_deny_skips_the_command_and_the_turn_goes_on(sandbox, workspace):
    out = os.path.join(workspace, "out")
    with shell_session(sandbox) as session:
        turn = session.turn(f"echo first >> {out}\necho second >> {out}")
        seen = []
        first = next_request(turn, seen)
        recorded = turn.deny(first, "not that one")
        assert recorded.decision == "deny" and recorded.message == "not that one" and not recorded.allowed
        second = next_request(turn, seen)
        assert second.request_id != first.request_id
        turn.approve(second.request_id)  # by its id, as a str
        seen.extend(turn)
    assert lines(out) == ["second"]
    results = of_type(seen, bc.ToolResult)
    assert results[0].is_error
    assert results[0].output == {"denied": True, "message": "not that one", "by": "host"}
    assert not results[1].is_error
    assert [f.finish_reason for f in of_type(seen, bc.StepFinish)] == ["denied", "stop"]
    assert session.state.data == {"commands": 1}  # the denied command did not run


def test_c18_an_answer_sent_twice_is_recorded_once(sandbox, workspace):
    out = os.path.join(workspace, "out")
    with shell_session(sandbox) as session:
        turn = session.turn(f"echo ran >> {out}")
        seen = []
        request = next_request(turn, seen)
        first = turn.approve(request)
        again = turn.approve(request)  # the same decision: the recorded answer back
        assert again == first
        seen.extend(turn)
        assert turn.approve(request) == first  # still, after the turn finished
    assert len(of_type(seen, bc.ApprovalAnswer)) == 1
    assert lines(out) == ["ran"]


def test_c18_a_conflicting_answer_fails_naming_the_first(sandbox, workspace):
    out = os.path.join(workspace, "out")
    with shell_session(sandbox) as session:
        turn = session.turn(f"echo ran >> {out}")
        seen = []
        request = next_request(turn, seen)
        turn.deny(request, "no")
        with pytest.raises(bc.ApprovalConflict) as info:
            turn.approve(request)
        assert info.value.recorded == {
            "requestId": request.request_id, "decision": "deny", "message": "no", "by": "host"
        }
        assert "deny" in str(info.value)
        with pytest.raises(bc.ApprovalNotFound):
            turn.approve("0.1.99-00000000")
        seen.extend(turn)
    assert lines(out) is None
    assert [a.decision for a in of_type(seen, bc.ApprovalAnswer)] == ["deny"]


def test_c18_approval_timeout_denies_and_records_it(sandbox, workspace):
    out = os.path.join(workspace, "out")
    with shell_session(sandbox, approval_timeout=0.5) as session:
        turn = session.turn(f"echo ran >> {out}")
        parts = list(turn)  # nobody answers
        request = of_type(parts, bc.ApprovalRequest)[0]
        (answer,) = of_type(parts, bc.ApprovalAnswer)
        assert (answer.request_id, answer.decision, answer.by) == (request.request_id, "deny", "timeout")
        with pytest.raises(bc.ApprovalExpired) as info:
            turn.approve(request)
        assert info.value.recorded["by"] == "timeout"
    assert lines(out) is None


def test_c18_a_cancel_ends_the_wait(sandbox, workspace):
    out = os.path.join(workspace, "out")
    with shell_session(sandbox) as session:
        turn = session.turn(f"echo ran >> {out}")
        seen = []
        request = next_request(turn, seen)
        turn.cancel()
        seen.extend(turn)
        with pytest.raises(bc.ApprovalExpired):
            turn.approve(request)
    (answer,) = of_type(seen, bc.ApprovalAnswer)
    assert (answer.decision, answer.by) == ("deny", "cancel")
    assert turn.finish.finish_reason == "cancelled"
    assert lines(out) is None


def test_c18_allow_always_is_remembered_per_session_and_survives_a_bridge_restart(sandbox, workspace):
    out = os.path.join(workspace, "out")
    with shell_session(sandbox) as session:
        turn = session.turn(f"echo one >> {out}\necho two >> {out}")
        seen = []
        turn.approve(next_request(turn, seen), always=True)
        seen.extend(turn)  # the second command is allowed without a host answer
        answers = of_type(seen, bc.ApprovalAnswer)
        assert [(a.decision, a.by) for a in answers] == [("allow-always", "host"), ("allow-always", "policy")]
        sigkill_bridge(sandbox, session.bridge_id)
        again = list(session.turn(f"echo three >> {out}"))  # a new bridge, the same session
        assert [(a.decision, a.by) for a in of_type(again, bc.ApprovalAnswer)] == [("allow-always", "policy")]
        with shell_session(sandbox) as other:  # another session still asks
            turn = other.turn(f"echo four >> {out}")
            request = next_request(turn, [])
            turn.deny(request)
            list(turn)
    assert lines(out) == ["one", "two", "three"]


def test_c18_approvals_off_is_the_behaviour_of_before(sandbox, workspace):
    out = os.path.join(workspace, "out")
    so = session_options(sandbox)
    assert so.approvals is False and so.interactive_payload() is None  # OpenSession carries nothing new
    with bc.create_session(options("shell"), so) as session:
        parts = list(session.turn(f"echo ran >> {out}"))
    assert [p.type for p in parts] == [
        "turn-start", "step-start", "tool-call", "tool-result", "step-finish", "session-state", "turn-finish"
    ]
    assert lines(out) == ["ran"]


def test_c18_a_driver_that_cannot_ask_refuses_approvals(sandbox):
    so = session_options(sandbox, approvals=True)
    with bc.create_session(options("echo"), so) as session:
        with pytest.raises(bc.ApprovalsUnsupported) as info:
            session.turn("hello")
        assert "echo" in str(info.value)
    # approve= implies approvals
    assert session_options(sandbox, approve=lambda request: True).approvals is True


def test_c18_the_approve_policy_answers_in_the_reading_thread(sandbox, workspace):
    import threading

    out = os.path.join(workspace, "out")
    asked = []

    def policy(request):
        asked.append((request.input["command"], threading.get_ident()))
        return "deny" if "two" in request.input["command"] else True

    with shell_session(sandbox, approve=policy) as session:
        parts = list(session.turn(f"echo one >> {out}\necho two >> {out}"))
    assert [a for a, _ in asked] == [f"echo one >> {out}", f"echo two >> {out}"]
    assert {t for _, t in asked} == {threading.get_ident()}
    answers = [(a.decision, a.by) for a in of_type(parts, bc.ApprovalAnswer)]
    assert answers == [("allow-once", "policy"), ("deny", "policy")]
    assert lines(out) == ["one"]


def test_c18_reading_a_turn_again_does_not_ask_the_policy_about_answered_requests(sandbox, workspace):
    out = os.path.join(workspace, "out")
    with shell_session(sandbox, approve=lambda request: True) as session:
        turn = session.turn(f"echo one >> {out}\necho two >> {out}")
        list(turn)
    asked = []
    with shell_session(sandbox, approve=lambda request: asked.append(request) or True) as again:
        parts = list(again.continue_turn(turn.state))
    assert len(of_type(parts, bc.ApprovalAnswer)) == 2
    assert asked == []
    assert lines(out) == ["one", "two"]


def test_c18_a_policy_that_raises_decides_nothing_and_its_error_says_the_request_is_pending(
    sandbox, workspace
):
    # The policy's own exception comes out of the read, as it is, noted with the request it
    # left pending; nothing is recorded for it, the policy is not asked again, and the caller's
    # answer (or the approval timeout) decides.
    out = os.path.join(workspace, "out")
    calls = []

    def policy(request):
        calls.append(request.request_id)
        raise KeyError("command")

    with shell_session(sandbox, approve=policy, approval_timeout=1.0) as session:
        turn = session.turn(f"echo one >> {out}\necho two >> {out}")
        seen = []
        first = next_request(turn, seen)
        with pytest.raises(KeyError) as raised:
            next(turn)
        notes = getattr(raised.value, "__notes__", [])
        assert len(notes) == 1 and first.request_id in notes[0] and "still pending" in notes[0], notes
        assert "turn.approve(request) or turn.deny(request)" in notes[0]
        assert turn.pending_approvals == [first], "left to the caller"
        assert turn.approve(first).by == "host"
        second = next_request(turn, seen)
        with pytest.raises(KeyError):
            next(turn)
        seen.extend(turn)  # nobody answers the second: the approval timeout denies it
    answers = [(a.request_id, a.decision, a.by) for a in of_type(seen, bc.ApprovalAnswer)]
    assert answers == [
        (first.request_id, "allow-once", "host"), (second.request_id, "deny", "timeout")
    ], "the policy's failure recorded nothing"
    assert calls == [first.request_id, second.request_id], "asked once per request"
    assert lines(out) == ["one"]


@pytest.mark.parametrize("driver", ["echo", "gemini", "pi", "codex"])
def test_c18_approvals_on_a_driver_that_cannot_ask_are_refused_before_any_launch(sandbox, workspace, driver):
    from host_support import _pids_under

    from bridge_client.state_dir import identity

    agent_options = None if driver == "echo" else {"executable": os.path.join(workspace, "no-such-cli")}
    with bc.create_session(
        options(driver, agent_options=agent_options), session_options(sandbox, approvals=True)
    ) as session:
        with pytest.raises(bc.ApprovalsUnsupported) as info:
            session.turn("hello")
        assert str(info.value) == (
            f"the {driver} agent cannot ask before it runs a tool: open the session with approvals off"
        )
        assert info.value.fields.get("sessionId") == session.id
        assert not session.connected
        folder = identity.state_dir(sandbox.state_root, session.bridge_id)
        assert not os.path.exists(folder), "no state directory was made"
        assert _pids_under(workspace) == [], "no bridge process was started"
        with pytest.raises(bc.ApprovalsUnsupported):  # again: the same, still nothing launched
            session.turn("hello")
    assert _pids_under(workspace) == []


def test_c18_the_drivers_that_cannot_ask_are_the_ones_the_host_refuses():
    import importlib

    from bridge_client.driver_options import CANNOT_ASK
    from bridge_client.drivers import BUILTIN_DRIVERS

    needs = {"openai": {"model": "m"}, "acp": {"command": "x"}}
    cannot = set()
    for name, spec in BUILTIN_DRIVERS.items():
        module, _, attr = spec.partition(":")
        driver = getattr(importlib.import_module(module), attr)(needs.get(name))
        if not getattr(driver, "supports_approvals", False):
            cannot.add(name)
        getattr(driver, "close", lambda: None)()
    assert cannot == set(CANNOT_ASK)

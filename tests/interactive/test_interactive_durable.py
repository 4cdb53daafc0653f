"""Approvals and messages across failures (C18 with C08, C10, C13, B05): a host killed with a
request pending is replaced by another process that holds only the turn-start JSON; an answer
whose reply a dropped connection lost is resent and applied once; a bridge killed after the
answer and before the command ran asks again in the step's next attempt (the old request
expires) and the command runs once; a message taken by an abandoned attempt is handed again."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import bridge_client as bc
from host_support import options, session_options
from interactive_support import lines, next_request, of_type, shell_session
from resilience_support import sigkill_bridge

pytestmark = pytest.mark.timeout(120)

HERE = os.path.dirname(os.path.abspath(__file__))


def test_c18_a_killed_hosts_pending_request_is_answered_from_another_process(sandbox, workspace, tmp_path):
    out = os.path.join(workspace, "out")
    state_file = str(tmp_path / "turn-state.json")
    host = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "host_with_pending_approval.py"), workspace, state_file,
         f"echo ran >> {out}"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = host.stdout.readline()
        assert line.startswith("pending "), line
        request_id = line.split()[1]
    finally:
        host.kill()  # SIGKILL: nothing of the host is cleaned up
        host.wait(10)
    assert host.returncode == -9
    with open(state_file, encoding="utf-8") as f:
        state = bc.TurnState.from_json(f.read())  # all the second process holds
    assert lines(out) is None
    with bc.create_session(options("shell"), session_options(sandbox)) as session:
        turn = session.continue_turn(state)
        seen = []
        request = next_request(turn, seen)  # the pending request is a part of the log
        assert request.request_id == request_id
        assert [r.request_id for r in turn.pending_approvals] == [request_id]
        turn.approve(request)
        seen.extend(turn)
    assert turn.finish.finish_reason == "stop"
    assert lines(out) == ["ran"]


def test_c18_an_answer_whose_reply_was_dropped_is_resent_and_applied_once(proxied, workspace):
    out = os.path.join(workspace, "out")
    with shell_session(proxied) as session:
        turn = session.turn(f"echo ran >> {out}")
        seen = []
        request = next_request(turn, seen)
        # AnswerApproval's reply is the only frame whose success value starts with requestId: the
        # connection drops when it passes, after the bridge recorded the answer, before the host has it.
        proxied.current().drop_when(b'"value":{"requestId"')
        recorded = turn.approve(request)
        assert proxied.current().rules_left() == 0, "the reply was not dropped"
        assert recorded.decision == "allow-once" and recorded.by == "host"
        seen.extend(turn)
    assert len(of_type(seen, bc.ApprovalAnswer)) == 1
    assert lines(out) == ["ran"]
    assert proxied.accepted >= 2  # a new connection carried the resend


def test_c18_a_bridge_killed_after_the_answer_asks_again_and_the_command_runs_once(sandbox, workspace):
    out = os.path.join(workspace, "out")
    # The command appends after a pause. A bridge killed right after the answer either died
    # before the command started (the repeated step asks again, in a new attempt) or after (the
    # command goes on under its keeper and the repeated step takes its result, C24): which one
    # depends on the race between the kill and the start. Either way it runs once.
    command = f"sleep 2; echo ran >> {out}"
    with shell_session(sandbox) as session:
        turn = session.turn(command)
        seen = []
        first = next_request(turn, seen)
        turn.approve(first)
        sigkill_bridge(sandbox, session.bridge_id)
        asked = []
        for part in turn:
            seen.append(part)
            if isinstance(part, bc.ApprovalRequest):
                asked.append(part)
                assert part.request_id != first.request_id
                assert (part.step, part.attempt) == (first.step, first.attempt + 1)
                assert [r.request_id for r in turn.pending_approvals] == [part.request_id]
                with pytest.raises(bc.ApprovalExpired):
                    turn.approve(first)  # never applied to the new attempt's request
                turn.approve(part)
        assert len(asked) <= 1
    assert lines(out) == ["ran"]
    resets = of_type(seen, bc.StepReset)
    assert [(r.step, r.discarded_attempt) for r in resets] == [(first.step, first.attempt)]
    assert turn.finish.finish_reason == "stop"


def test_c18_a_message_taken_by_an_abandoned_attempt_is_handed_again(sandbox, workspace):
    out = os.path.join(workspace, "out")
    with shell_session(sandbox) as session:
        turn = session.turn(f"echo prompt >> {out}")
        seen = []
        first = next_request(turn, seen)
        turn.say(f"echo message >> {out}", message_id="m1")
        turn.approve(first)
        asked = next_request(turn, seen)  # the message's step asks
        assert asked.input == {"command": f"echo message >> {out}"}
        sigkill_bridge(sandbox, session.bridge_id)
        again = next_request(turn, seen)
        assert again.input == asked.input and again.attempt == asked.attempt + 1
        turn.approve(again)
        seen.extend(turn)
    assert lines(out) == ["prompt", "message"]
    assert len(of_type(seen, bc.UserMessage)) == 1
    calls = [c.input for c in of_type(seen, bc.ToolCall)]
    assert calls[-1] == {"command": f"echo message >> {out}", "messageId": "m1"}

"""Host tool calls are durable as approvals are: a result whose reply was dropped is resent
and recorded once, an answer sent again gets the recorded result back, and a call nobody
answers gets an error result after the tool timeout. Real bridge processes, the scripted
``openai`` model (tests/host_tools/host_tools_mock.py), a TCP proxy that drops frames."""
from __future__ import annotations

import pytest

import bridge_client as bc
from bridge_client.wire import host_parts
from host_support import session_options

pytestmark = pytest.mark.timeout(90)


def _tool_message(request):
    (message,) = [m for m in request["body"]["messages"] if m["role"] == "tool"]
    return message["content"]


def test_c22_a_result_whose_reply_was_dropped_is_resent_and_recorded_once(proxied, model):
    calls = []

    def lookup(key: str) -> str:
        """Look a key up."""
        calls.append(key)
        # AnswerHostTool's reply is the only frame with a recorded result's status: the
        # connection drops when it passes, after the bridge recorded it, before the host has it.
        proxied.current().drop_when(b'"by":"host","status":"recorded"')
        return f"value of {key}"

    with bc.create_session(model("host-lookup"), session_options(proxied, tools=[lookup])) as session:
        turn = session.turn("look alpha up")
        parts = list(turn)
    assert proxied.current().rules_left() == 0, "the reply was not dropped"
    assert proxied.accepted >= 2, "a new connection carried the resend"
    assert calls == ["alpha"]
    results = [p for p in parts if isinstance(p, bc.HostToolResult)]
    assert [(r.output, r.by) for r in results] == [("value of alpha", "host")], "recorded once"
    assert turn.finish.finish_reason == "stop"
    assert _tool_message(model.requests()[1]) == "value of alpha"


def test_c22_the_same_answer_again_gets_the_recorded_result_and_a_claim_after_it_runs_nothing(
    sandbox, model
):
    def lookup(key: str) -> str:
        """Look a key up."""
        return "first"

    with bc.create_session(model("host-lookup"), session_options(sandbox, tools=[lookup])) as session:
        turn = session.turn("look alpha up")
        parts = list(turn)
        call = next(p for p in parts if isinstance(p, bc.HostToolCall))
        ids = {"sessionId": session.id, "turnId": turn.id, "callId": call.call_id}
        again = turn._call(host_parts.ANSWER_HOST_TOOL, {**ids, "output": "second", "isError": False})
        claim = turn._call(host_parts.CLAIM_HOST_TOOL, {**ids, "hostId": "another-host", "retry": True})
        with pytest.raises(bc.HostToolCallNotFound):
            turn._call(host_parts.CLAIM_HOST_TOOL, {**ids, "callId": "no-such-call", "hostId": "h"})
    assert (again["output"], again["by"]) == ("first", "host"), "the first result stands"
    assert claim["status"] in ("answered", "expired"), "a finished call is never run again"
    assert [p.output for p in parts if isinstance(p, bc.HostToolResult)] == ["first"]


def test_c22_a_call_nobody_answers_gets_an_error_result_after_the_tool_timeout(sandbox, model):
    calls = []

    def lookup(key: str) -> str:
        """Look a key up."""
        calls.append(key)
        return "too late"

    so = session_options(sandbox, tools=[lookup], tool_timeout=0.5)
    with bc.create_session(model("host-lookup"), so) as session:
        state = session.turn("look alpha up").suspend()  # read up to turn-start only
    # A reader without the tool: it sees the call and leaves it; the bridge's timeout answers.
    with bc.create_session(model("host-lookup"), session_options(sandbox)) as reader:
        done = reader.continue_turn(state)
        parts = list(done)
    assert calls == []
    (result,) = [p for p in parts if isinstance(p, bc.HostToolResult)]
    assert result.is_error and result.by == "timeout"
    assert result.output == "the host did not answer the call of tool lookup within 0.5 seconds"
    assert _tool_message(model.requests()[1]) == result.output
    assert done.finish.finish_reason == "stop"

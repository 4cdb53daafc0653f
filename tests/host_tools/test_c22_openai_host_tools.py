"""Host tools through the ``openai`` driver (native function tools), with real bridge
processes and the scripted model (tests/host_tools/host_tools_mock.py): the function runs in
this test's process, once per call, and its result is in the model's next request."""
from __future__ import annotations

import json
import os
import signal
import threading

import pytest

import bridge_client as bc
from host_support import session_options

pytestmark = pytest.mark.timeout(90)


def _tool_messages(request):
    return [m for m in request["body"]["messages"] if m["role"] == "tool"]


def test_c22_openai_the_model_calls_a_host_tool_and_gets_its_result(sandbox, model):
    calls = []

    def lookup(key: str) -> dict:
        """Look a key up in the application's table.

        Args:
            key: the key to look up.
        """
        calls.append((key, threading.get_ident()))
        return {"key": key, "value": 42}

    with bc.create_session(model("host-lookup"), session_options(sandbox, tools=[lookup])) as session:
        turn = session.turn("look alpha up")
        parts = list(turn)
    assert [c[0] for c in calls] == ["alpha"], "the function ran once, in this process"
    assert calls[0][1] == threading.get_ident(), "in the thread that reads the turn"
    kinds = [p.type for p in parts]
    call = next(p for p in parts if isinstance(p, bc.HostToolCall))
    result = next(p for p in parts if isinstance(p, bc.HostToolResult))
    assert kinds.index("host-tool-call") < kinds.index("host-tool-result") < kinds.index("tool-result")
    assert (call.tool_name, call.input) == ("lookup", {"key": "alpha"})
    assert (result.call_id, result.output, result.is_error, result.by) == (
        call.call_id, {"key": "alpha", "value": 42}, False, "host"
    )
    assert turn.finish.finish_reason == "stop" and turn.text() == "Done."
    first, second = model.requests()
    (spec,) = [t for t in first["body"]["tools"] if t["function"]["name"] == "lookup"]
    assert spec["function"]["description"] == "Look a key up in the application's table."
    assert spec["function"]["parameters"]["properties"]["key"] == {
        "type": "string", "description": "the key to look up."
    }
    (message,) = _tool_messages(second)
    assert json.loads(message["content"]) == {"key": "alpha", "value": 42}


def test_c22_openai_an_exception_is_an_error_result_and_the_turn_goes_on(sandbox, model, caplog):
    def explode(why: str) -> str:
        """Fail on purpose."""
        raise RuntimeError(f"broken {why}")

    with bc.create_session(model("host-raise"), session_options(sandbox, tools=[explode])) as session:
        turn = session.turn("try it")
        parts = list(turn)
    result = next(p for p in parts if isinstance(p, bc.HostToolResult))
    assert result.is_error and result.output == "RuntimeError: broken on purpose"
    assert "Traceback" not in json.dumps(result.output)
    assert turn.finish.finish_reason == "stop" and turn.text() == "Noted."
    (message,) = _tool_messages(model.requests()[1])
    assert message["content"] == "RuntimeError: broken on purpose"
    assert any("host tool explode raised RuntimeError" in r.getMessage() for r in caplog.records)


def test_c22_openai_a_bridge_sigkill_while_the_function_runs_still_calls_it_once(sandbox, model):
    calls = []
    holder = {}

    def lookup(key: str) -> dict:
        """Look a key up."""
        calls.append(key)
        if len(calls) == 1:
            os.kill(holder["session"]._hello.pid, signal.SIGKILL)  # the bridge dies mid-call
        return {"key": key, "value": 7}

    with bc.create_session(model("host-lookup"), session_options(sandbox, tools=[lookup])) as session:
        holder["session"] = session
        first_pid = None
        turn = session.turn("look alpha up")
        parts = []
        for part in turn:
            parts.append(part)
            if first_pid is None:
                first_pid = session._hello.pid
        second_pid = session._hello.pid
    assert second_pid != first_pid, "the bridge was launched again"
    assert calls == ["alpha"], "the function ran once across the bridge's death"
    assert turn.finish.finish_reason == "stop" and turn.text() == "Done."
    assert [(r.step, r.discarded_attempt) for r in parts if isinstance(r, bc.StepReset)] == [(0, 1)]
    results = [p for p in parts if isinstance(p, bc.HostToolResult)]
    assert [r.output for r in results] == [{"key": "alpha", "value": 7}], "one recorded result"
    requests = model.requests()
    # The cut step is replayed from the driver's journal (its answer, its call's id), not asked
    # of the model again: the model is asked once more, with the one result.
    assert len(requests) == 2, "the model was asked for the step once, then for the answer"
    (message,) = _tool_messages(requests[1])
    assert json.loads(message["content"]) == {"key": "alpha", "value": 7}

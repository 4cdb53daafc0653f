"""The ``openai`` driver through a real bridge and a real Session, with the model endpoint
mocked by ``responses`` replaying realistic streamed answers.

``responses`` patches ``requests`` only in the process that starts it, and the driver runs in
the bridge process the Session launches. So these tests launch the bridge with the test
factory ``openai_mock:make_driver`` (tests/drivers/openai_mock.py, put on the bridge's
PYTHONPATH): it starts the mocks inside the bridge process and returns the real driver.
Requests the mocks got are logged to a file the tests read. Backoff options are tiny so
retries cost milliseconds.
"""

from __future__ import annotations

import json
import os
import signal

import pytest
import requests

import bridge_client as bc
from bridge_client.drivers.openai_chat import DEFAULT_SYSTEM, byte_lines, make_driver, sse_data
from host_support import options, session_options

pytestmark = pytest.mark.timeout(60)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


@pytest.fixture
def model(tmp_path, monkeypatch):
    """``model(scenario, **options)`` -> (bridge options, requests-log reader)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([HERE, REPO, os.environ.get("PYTHONPATH", "")]))
    log = str(tmp_path / "requests.jsonl")

    def make(scenario, **kw):
        agent_options = {
            "model": "gpt-test",
            "backoff_initial": 0.01,
            "backoff_max": 0.05,
            "mock": {"scenario": scenario, "log": log},
        }
        agent_options.update(kw)
        return options("openai_mock:make_driver", agent_id="openai", agent_options=agent_options)

    def requests():
        if not os.path.exists(log):
            return []
        with open(log) as f:
            return [json.loads(line) for line in f]

    make.requests = requests
    return make


def _finish(parts):
    assert parts[-1].type == "turn-finish"
    return parts[-1]


def test_openai_plain_text_streams_as_text_deltas(sandbox, model, monkeypatch):
    monkeypatch.setenv("TEST_MODEL_KEY", "sk-test-123")
    with bc.create_session(
        model("plain", api_key_env="TEST_MODEL_KEY", temperature=0.2), session_options(sandbox)
    ) as session:
        turn = session.turn("Say hello")
        parts = list(turn)
        state = session.state
    finish = _finish(parts)
    assert finish.finish_reason == "stop"
    assert finish.usage == {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14}
    assert [p.text for p in parts if p.type == "text-delta"] == ["Hello", ", ", "world", "!"]
    assert [(p.step, p.finish_reason) for p in parts if p.type == "step-finish"] == [(0, "stop")]
    (request,) = model.requests()
    assert request["authorization"] == "Bearer sk-test-123", "the key comes from api_key_env in the bridge"
    body = request["body"]
    assert body["model"] == "gpt-test" and body["stream"] is True and body["temperature"] == 0.2
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [
        {"role": "system", "content": DEFAULT_SYSTEM},
        {"role": "user", "content": "Say hello"},
    ]
    assert [t["function"]["name"] for t in body["tools"]] == [
        "run_command",
        "read_file",
        "write_file",
        "list_dir",
    ]
    # The conversation is the session state (C07), without the system prompt.
    assert state.data["messages"] == [
        {"role": "user", "content": "Say hello"},
        {"role": "assistant", "content": "Hello, world!"},
    ]


def test_openai_text_before_a_malformed_chunk_is_in_the_log(sandbox, model):
    """The chunks of one network read go to the log as one batch: a bad chunk in it must not
    take the text before it along (the turn ends with an error either way)."""
    with bc.create_session(model("malformed-after-text"), session_options(sandbox)) as session:
        parts = list(session.turn("?"))
    assert "".join(p.text for p in parts if p.type == "text-delta") == "Hello"
    assert _finish(parts).finish_reason == "error"


def test_openai_reasoning_deltas(sandbox, model):
    with bc.create_session(model("reasoning"), session_options(sandbox)) as session:
        parts = list(session.turn("?"))
    assert [p.text for p in parts if p.type == "reasoning-delta"] == ["Think. ", "Then answer."]
    assert _finish(parts).finish_reason == "stop"


def test_openai_parallel_tool_calls_split_across_chunks_run_in_the_workspace(sandbox, model, workspace):
    with bc.create_session(model("tools"), session_options(sandbox)) as session:
        turn = session.turn("Write a note")
        parts = list(turn)
        state = session.state
    assert _finish(parts).finish_reason == "stop"
    with open(os.path.join(workspace, "notes", "a.txt")) as f:
        assert f.read() == "hi\nthere"
    calls = [(p.step, p.tool_call_id, p.tool_name, p.input) for p in parts if isinstance(p, bc.ToolCall)]
    assert calls == [
        (0, "call_w", "write_file", {"path": "notes/a.txt", "content": "hi\nthere"}),
        (0, "call_l", "list_dir", {"path": "."}),
    ]
    results = {p.tool_call_id: p for p in parts if isinstance(p, bc.ToolResult)}
    assert results["call_w"].output == {"path": "notes/a.txt", "bytes": 8} and not results["call_w"].is_error
    assert results["call_l"].output == "notes/"
    assert [(p.step, p.finish_reason) for p in parts if p.type == "step-finish"] == [
        (0, "tool_calls"),
        (1, "stop"),
    ]
    assert turn.text() == "Writing. Done: notes/a.txt written."
    first, second = model.requests()
    sent = second["body"]["messages"]
    assert sent[2]["role"] == "assistant" and [c["id"] for c in sent[2]["tool_calls"]] == ["call_w", "call_l"]
    assert (
        sent[2]["tool_calls"][0]["function"]["arguments"]
        == '{"path": "notes/a.txt", "content": "hi\\nthere"}'
    )
    assert [(m["role"], m["tool_call_id"]) for m in sent[3:5]] == [("tool", "call_w"), ("tool", "call_l")]
    assert state.data["messages"][:4] == sent[1:5] and len(state.data["messages"]) == 5


def test_openai_bad_tool_arguments_go_back_to_the_model(sandbox, model):
    with bc.create_session(model("bad-arguments"), session_options(sandbox)) as session:
        parts = list(session.turn("read"))
    (result,) = [p for p in parts if isinstance(p, bc.ToolResult)]
    assert result.is_error and "not valid JSON" in result.output
    assert _finish(parts).finish_reason == "stop"


def test_openai_paths_outside_the_workspace_are_refused(sandbox, model):
    with bc.create_session(model("escape"), session_options(sandbox)) as session:
        parts = list(session.turn("read"))
    (result,) = [p for p in parts if isinstance(p, bc.ToolResult)]
    assert result.is_error and "outside the workspace" in result.output


def test_openai_429_and_503_are_retried_then_the_answer_streams(sandbox, model):
    with bc.create_session(model("429-then-ok"), session_options(sandbox)) as session:
        turn = session.turn("hi")
        parts = list(turn)
    assert _finish(parts).finish_reason == "stop" and turn.text() == "After waiting."
    assert len(model.requests()) == 3
    assert [p.type for p in parts].count("step-start") == 1, "retried requests are not new steps"


def test_openai_server_errors_stop_after_max_retries(sandbox, model):
    with bc.create_session(model("always-500", max_retries=2), session_options(sandbox)) as session:
        parts = list(session.turn("hi"))
    finish = _finish(parts)
    assert (
        finish.finish_reason == "error"
        and "after 3 tries" in finish.error
        and "server had an error" in finish.error
    )
    assert len(model.requests()) == 3


def test_openai_cancel_cuts_a_retry_backoff_short(sandbox, model):
    with bc.create_session(
        model("always-500", backoff_initial=30, backoff_max=30), session_options(sandbox)
    ) as session:
        turn = session.turn("hi")
        parts = [next(turn)]
        turn.cancel()
        parts += list(turn)
    assert _finish(parts).finish_reason == "cancelled"
    assert len(model.requests()) == 1, "no request after the cancel"


def test_openai_a_server_that_does_not_stream_is_read_whole(sandbox, model):
    with bc.create_session(model("not-streamed"), session_options(sandbox)) as session:
        turn = session.turn("what is here?")
        parts = list(turn)
    assert _finish(parts).finish_reason == "stop", _finish(parts)
    assert turn.text() == "Empty folder."
    assert [(p.tool_call_id, p.tool_name, p.input) for p in parts if isinstance(p, bc.ToolCall)] == [
        ("call_j", "list_dir", {})
    ]


def test_openai_400_ends_the_turn_with_the_endpoint_message(sandbox, model):
    with bc.create_session(model("400"), session_options(sandbox)) as session:
        parts = list(session.turn("hi"))
    finish = _finish(parts)
    assert finish.finish_reason == "error"
    assert "400" in finish.error and "does not exist" in finish.error
    assert len(model.requests()) == 1, "a 400 is not retried"


def test_openai_stream_cut_mid_answer_resets_and_reruns_the_step(sandbox, model):
    with bc.create_session(model("cut"), session_options(sandbox)) as session:
        turn = session.turn("hi")
        parts = list(turn)
    assert _finish(parts).finish_reason == "stop"
    resets = [p for p in parts if isinstance(p, bc.StepReset)]
    assert [(r.step, r.discarded_attempt) for r in resets] == [(0, 1), (0, 2)]
    assert "model stream cut" in resets[0].reason
    # Parts of an attempt already discarded when read are skipped by the bridge (ReadTurn), so
    # only the last attempt's step-start is sure to be seen.
    assert [(p.step, p.attempt) for p in parts if p.type == "step-start"][-1] == (0, 3)
    assert [(p.step, p.attempt) for p in parts if p.type == "step-finish"] == [(0, 3)]
    assert turn.text() == "Hello world.", "the text of discarded attempts is dropped"
    assert len(model.requests()) == 3


def test_openai_max_steps_ends_the_loop(sandbox, model):
    with bc.create_session(model("endless-tools", max_steps=2), session_options(sandbox)) as session:
        parts = list(session.turn("loop"))
    assert _finish(parts).finish_reason == "max-steps"
    assert [p.step for p in parts if p.type == "step-finish"] == [0, 1]


def test_openai_cancel_kills_a_running_command(sandbox, model):
    with bc.create_session(model("slow-command"), session_options(sandbox)) as session:
        turn = session.turn("sleep")
        parts = []
        for part in turn:
            parts.append(part)
            if part.type == "tool-call":
                turn.cancel()
    assert _finish(parts).finish_reason == "cancelled"
    (result,) = [p for p in parts if isinstance(p, bc.ToolResult)]
    assert result.output["cancelled"] is True and result.is_error
    assert len(model.requests()) == 1


def test_openai_cancel_stops_a_silent_model_stream(sandbox, model):
    with bc.create_session(model("silent-model"), session_options(sandbox)) as session:
        turn = session.turn("hi")
        parts = []
        for part in turn:
            parts.append(part)
            if part.type == "text-delta":
                turn.cancel()
    assert _finish(parts).finish_reason == "cancelled"
    assert turn.text() == "Let me"


def test_b05_openai_continues_after_a_restart_with_the_same_conversation(sandbox, model, workspace):
    with bc.create_session(model("restart"), session_options(sandbox)) as session:
        turn = session.turn("write then check")
        parts = []
        for part in turn:
            parts.append(part)
            if part.type == "text-delta" and part.text == "Checking":
                first_pid = session._hello.pid
                os.kill(first_pid, signal.SIGKILL)
    assert _finish(parts).finish_reason == "stop"
    assert [(r.step, r.discarded_attempt) for r in parts if isinstance(r, bc.StepReset)] == [(1, 1)]
    assert turn.text() == "Finished."
    first, cut, again = model.requests()
    assert cut["body"]["messages"] == again["body"]["messages"], "the step ran again on the same conversation"
    assert [m["role"] for m in again["body"]["messages"]] == ["system", "user", "assistant", "tool"]
    with open(os.path.join(workspace, "out.txt")) as f:
        assert f.read() == "1"


def test_openai_options_are_checked_and_a_key_is_refused():
    with pytest.raises(ValueError, match="never put the API key"):
        make_driver({"model": "m", "api_key": "sk-secret"})
    with pytest.raises(ValueError, match="'model' is required"):
        make_driver({})
    with pytest.raises(ValueError, match="max_steps"):
        make_driver({"model": "m", "max_steps": 0})
    with pytest.raises(ValueError, match="base_url"):
        make_driver({"model": "m", "base_url": "ftp://x"})
    assert make_driver({"model": "m"}).agent_id == "openai"


def test_sse_parsing_follows_the_standard_across_chunk_boundaries():
    chunks = [
        b'data: {"a":',
        b"1}\r",
        b"\n\r\n: keep-alive\n\ndata: line one\ndata: line two\n\n",
        b"data: [DONE]",
    ]
    assert list(sse_data(byte_lines(chunks))) == ['{"a":1}', "line one\nline two", "[DONE]"]


@pytest.mark.parametrize("framing", ["close-delimited", "chunked"])
def test_openai_stream_bytes_arrive_before_the_body_ends_and_a_cancel_unblocks_the_read(framing):
    """Against a real socket: an SSE answer whose server then goes silent. The first event is
    read while the body is still open, and shutting the socket down (what a cancel does) ends
    the blocked read instead of leaving it for the server's 60 s."""
    import socket
    import threading

    from bridge_client.drivers.openai_chat import _abort, _arriving

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    release = threading.Event()

    def serve():
        conn, _ = server.accept()
        conn.recv(65536)
        event = b'data: {"x":1}\n\n'
        if framing == "chunked":
            head = b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % len(event) + event + b"\r\n"
        else:
            head = b"\r\n" + event
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n" + head)
        release.wait(60)
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    try:
        port = server.getsockname()[1]
        response = requests.post(
            f"http://127.0.0.1:{port}/v1/chat/completions", json={}, stream=True, timeout=(5, 60)
        )
        chunks = _arriving(response)
        assert next(chunks) == b'data: {"x":1}\n\n'
        ended = []

        def read_on():
            try:
                ended.append(next(chunks, b""))
            except Exception as exc:  # urllib3 reports the cut
                ended.append(type(exc).__name__)

        reader = threading.Thread(target=read_on, daemon=True)
        reader.start()
        reader.join(0.2)
        assert reader.is_alive(), "the read blocks while the server is silent"
        _abort(response)
        reader.join(10)
        assert not reader.is_alive() and ended, "shutting the socket down ended the read"
    finally:
        release.set()
        server.close()


def test_c07_openai_a_fresh_bridge_goes_on_with_the_conversation(sandbox, model):
    with bc.create_session(model("plain"), session_options(sandbox)) as session:
        list(session.turn("Say hello"))
        state = session.state
    # Other options make another bridge id: a fresh bridge, given only the session state.
    with bc.create_session(model("plain", temperature=0.5), session_options(sandbox, resume=state)) as again:
        assert _finish(list(again.turn("Again"))).finish_reason == "stop"
        assert again.bridge_id != session.bridge_id
    first, second = model.requests()
    assert second["body"]["messages"][1:] == [
        {"role": "user", "content": "Say hello"},
        {"role": "assistant", "content": "Hello, world!"},
        {"role": "user", "content": "Again"},
    ]

"""The scripted model server (tests/agents/model_server.py) over real sockets: each API's
stream carries the scripted blocks, requests are recorded, unknown endpoints get a 404."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest

from model_server import ModelServer, hang, shell_call, text, text_quoting_last_tool_output, tool_call

pytestmark = pytest.mark.timeout(30)

STR = {"type": "string"}
CMD = {"properties": {"command": STR}}

BASH = {"name": "Bash", "input_schema": {"type": "object", "properties": {"command": {"type": "string"},
                                                                          "description": {"type": "string"}}}}


def post(server, path, body):
    headers = {"content-type": "application/json"}
    req = urllib.request.Request(server.url + path, json.dumps(body).encode(), headers)
    with urllib.request.urlopen(req, timeout=10) as resp:
        raw = resp.read().decode()
        if resp.headers["content-type"] != "text/event-stream":
            return json.loads(raw)
    events = []
    for chunk in raw.split("\n\n"):
        data = [line[6:] for line in chunk.splitlines() if line.startswith("data: ")]
        if data:
            events.append(data[0] if data[0] == "[DONE]" else json.loads(data[0]))
    return events


@pytest.fixture
def server():
    with ModelServer() as s:
        yield s


def test_anthropic_stream_tool_use_then_text_quoting_the_result(server):
    server.script(shell_call("echo hi"), text_quoting_last_tool_output("Saw: "))
    events = post(server, "/v1/messages?beta=true", {"stream": True, "tools": [BASH], "messages": []})
    kinds = [e["type"] for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    start = next(e for e in events if e["type"] == "content_block_start")
    assert start["content_block"]["type"] == "tool_use" and start["content_block"]["name"] == "Bash"
    args = "".join(e["delta"]["partial_json"] for e in events if e["type"] == "content_block_delta")
    assert json.loads(args)["command"] == "echo hi"
    assert events[-2]["delta"]["stop_reason"] == "tool_use"
    history = [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x",
                                             "content": [{"type": "text", "text": "hi\n"}]}]}]
    events = post(server, "/v1/messages", {"stream": True, "tools": [BASH], "messages": history})
    said = "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta")
    assert said == "Saw: hi" and events[-2]["delta"]["stop_reason"] == "end_turn"
    assert [r.kind for r in server.requests] == ["agent", "agent"]
    assert server.requests[0].query == {"beta": "true"} and server.pending() == 0


def test_chat_completions_tool_calls_split_across_chunks_and_usage(server):
    tools = [{"type": "function", "function": {"name": "run_shell_command",
                                               "parameters": CMD}}]
    server.script(shell_call("ls"), text("all done", chunks=2))
    chunks = post(server, "/v1/chat/completions",
                  {"stream": True, "stream_options": {"include_usage": True}, "tools": tools, "messages": []})
    assert chunks[-1] == "[DONE]" and chunks[-2]["usage"]["completion_tokens"] > 0
    deltas = [c["choices"][0]["delta"] for c in chunks[:-2]]
    pieces = [d["tool_calls"][0]["function"].get("arguments", "") for d in deltas if "tool_calls" in d]
    assert len(pieces) > 2 and json.loads("".join(pieces)) == {"command": "ls"}
    assert chunks[-3]["choices"][0]["finish_reason"] == "tool_calls"
    history = [{"role": "tool", "tool_call_id": "c", "content": "a.txt"}]
    chunks = post(server, "/chat/completions", {"stream": True, "tools": tools, "messages": history})
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-1]) == "all done"
    assert server.agent_requests()[1].tool_outputs() == ["a.txt"]


def test_responses_function_call_with_cmd_argument(server):
    tools = [{"type": "function", "name": "exec_command", "parameters": {"properties": {"cmd": STR}}}]
    server.script(shell_call("pwd"), text_quoting_last_tool_output())
    events = post(server, "/v1/responses", {"stream": True, "tools": tools, "input": []})
    assert events[0]["type"] == "response.created" and events[-1]["type"] == "response.completed"
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert done[0]["type"] == "function_call" and json.loads(done[0]["arguments"]) == {"cmd": "pwd"}
    history = [{"type": "function_call_output", "call_id": done[0]["call_id"], "output": "/w\n"}]
    events = post(server, "/v1/responses", {"stream": True, "tools": tools, "input": history})
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas == "Tool output: /w"


def test_gemini_stream_function_call_and_side_request(server):
    tools = [{"functionDeclarations": [{"name": "run_shell_command",
                                        "parametersJsonSchema": CMD}]}]
    server.script(shell_call("date"))
    events = post(server, "/v1beta/models/m:streamGenerateContent?alt=sse", {"tools": tools, "contents": []})
    call = events[0]["candidates"][0]["content"]["parts"][0]["functionCall"]
    assert call["name"] == "run_shell_command" and call["args"] == {"command": "date"}
    assert events[-1]["candidates"][0]["finishReason"] == "STOP"
    # No tools: a side request, answered without touching the (now empty) script.
    side = post(server, "/v1beta/models/m:generateContent",
                {"contents": [], "generationConfig": {"responseMimeType": "application/json"}})
    assert json.loads(side["candidates"][0]["content"]["parts"][0]["text"])["next_speaker"] == "user"
    assert [r.kind for r in server.requests] == ["agent", "side"] and server.exhausted == []


def test_unknown_endpoint_is_a_404_and_recorded(server):
    with pytest.raises(urllib.error.HTTPError) as info:
        post(server, "/v1/nope", {})
    assert info.value.code == 404 and "no endpoint POST /v1/nope" in info.value.read().decode()
    assert [r.path for r in server.unknown] == ["/v1/nope"]


def test_exhausted_script_and_unbuildable_reply_are_recorded(server):
    post(server, "/v1/messages", {"stream": False, "tools": [BASH], "messages": []})
    assert len(server.exhausted) == 1
    server.script(shell_call("x"))
    other = [{"name": "Read", "input_schema": {}}]
    with pytest.raises(urllib.error.HTTPError) as info:
        post(server, "/v1/messages", {"stream": True, "tools": other, "messages": []})
    assert info.value.code == 500 and "no shell tool" in server.errors[0][1]


def test_hang_holds_the_stream_until_release(server):
    server.script(hang(tool_call("Bash", {"command": "true"}, say="Working")))
    got = []
    t = threading.Thread(target=lambda: got.append(
        post(server, "/v1/messages", {"stream": True, "tools": [BASH], "messages": []})))
    t.start()
    assert server.hanging.wait(5), "the reply is held after its first block"
    assert t.is_alive()
    server.release()
    t.join(5)
    assert got and got[0][-1]["type"] == "message_stop"

"""A driver factory for tests: the real ``openai`` driver, with its HTTP endpoint replaced by
``responses`` mocks *inside the bridge process*.

Why a factory: ``responses`` patches ``requests`` only in the process where it is started,
and drivers run inside the bridge process, which the host launches. So the tests launch the
bridge with ``--driver openai_mock:make_driver`` (this folder on ``PYTHONPATH``); this
factory takes its own ``mock`` option out of the agent options, starts ``responses`` with the
recorded replies of that scenario in the bridge process, and returns the real driver made
by :func:`bridge_client.drivers.openai_chat.make_driver` from the other options. Everything
else (bridge, store, sockets, Session) is real.

``mock`` is ``{"scenario": NAME, "log": PATH}``. The Nth request of the scenario gets its Nth
reply (the last one again after that), counted from the log file, so a bridge launched
after a restart goes on where the killed one stopped. Each request is appended to the log
(``{"authorization", "body"}``) before it is answered.

Replies are realistic Chat Completions streams (``data: {chat.completion.chunk}`` events,
``finish_reason``, a usage chunk, ``data: [DONE]``) as the OpenAI API reference documents
them, or HTTP errors with the API's ``{"error": {...}}`` body.
"""

from __future__ import annotations

import io
import json
import os
import threading
from typing import Any, Dict, List, Optional

import responses

from bridge_client.drivers.openai_chat import make_driver as real_make_driver

URL = "http://model.test/v1/chat/completions"


def chunk(
    delta: Optional[Dict[str, Any]] = None, finish: Optional[str] = None, usage: Any = None
) -> Dict[str, Any]:
    """One ``chat.completion.chunk``."""
    choices = (
        [] if delta is None else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
    )
    out: Dict[str, Any] = {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 1764460000,
        "model": "gpt-test",
        "system_fingerprint": "fp_test",
        "choices": choices,
    }
    if usage is not None or delta is None:
        out["usage"] = usage
    return out


def usage(prompt: int, completion: int) -> Dict[str, Any]:
    """A usage chunk (``stream_options.include_usage``): no choices, the call's usage."""
    return chunk(
        None,
        usage={"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    )


def text_stream(*pieces: str, finish: str = "stop") -> List[Any]:
    """A plain text answer in ``pieces``."""
    out: List[Any] = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": p}) for p in pieces]
    out += [chunk({}, finish), usage(10, len(pieces))]
    return out


def tool_stream(*calls: Any, content: str = "") -> List[Any]:
    """Parallel tool calls, each ``(id, name, [argument pieces])``, streamed as the API does:
    the first fragment of each call has its id, type and name, the next ones only more of the
    arguments; calls interleave."""
    out: List[Any] = [chunk({"role": "assistant", "content": content or None})]
    for index, (call_id, name, _) in enumerate(calls):
        out.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call_id,
                            "type": "function",
                            "function": {"name": name, "arguments": ""},
                        }
                    ]
                }
            )
        )
    longest = max(len(p) for _, _, p in calls)
    for i in range(longest):
        for index, (_, _, pieces) in enumerate(calls):
            if i < len(pieces):
                out.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": pieces[i]}}]}))
    out += [chunk({}, "tool_calls"), usage(20, 5)]
    return out


def sse(events: List[Any], done: bool = True) -> bytes:
    """The server-sent events text of ``events`` (JSON objects, or raw strings)."""
    body = "".join(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in events)
    return (body + ("data: [DONE]\n\n" if done else "")).encode()


def error_body(message: str, type_: str, code: Optional[str] = None) -> bytes:
    return json.dumps({"error": {"message": message, "type": type_, "param": None, "code": code}}).encode()


class _Raw(io.RawIOBase):
    """A body that gives ``data`` and then fails (``then="raise"``: the connection is reset)
    or blocks (``then="block"``: a model that went silent; at most 20 s, or until closed)."""

    def __init__(self, data: bytes, then: str) -> None:
        self.data, self.then = data, then
        self.closed_event = threading.Event()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.data:
            n = min(len(buffer), len(self.data))
            buffer[:n], self.data = self.data[:n], self.data[n:]
            return n
        if self.then == "raise":
            raise ConnectionResetError(104, "Connection reset by peer")
        self.closed_event.wait(20)
        return 0

    def close(self) -> None:
        self.closed_event.set()
        super().close()


SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


def completion(message: Dict[str, Any], finish: str) -> bytes:
    """A whole ``chat.completion`` (a server that ignores ``stream: true``)."""
    return json.dumps(
        {
            "id": "chatcmpl-whole",
            "object": "chat.completion",
            "created": 1764460000,
            "model": "gpt-test",
            "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
        }
    ).encode()


SCENARIOS: Dict[str, List[Dict[str, Any]]] = {
    "plain": [{"body": sse(text_stream("Hello", ", ", "world", "!"))}],
    # Text, then a chunk whose delta is not an object (a broken or hostile provider).
    "malformed-after-text": [
        {"body": sse([chunk({"content": "Hel"}), chunk({"content": "lo"}),
                      {"id": "x", "object": "chat.completion.chunk",
                       "choices": [{"index": 0, "delta": "?"}]}])}
    ],
    "reasoning": [
        {
            "body": sse(
                [
                    chunk({"role": "assistant", "reasoning_content": "Think. "}),
                    chunk({"reasoning_content": "Then answer."}),
                ]
                + text_stream("42")
            )
        }
    ],
    "tools": [
        {
            "body": sse(
                tool_stream(
                    (
                        "call_w",
                        "write_file",
                        ['{"pa', 'th": "notes/a.txt", ', '"content": "hi\\n', 'there"}'],
                    ),
                    ("call_l", "list_dir", ['{"path"', ': "."}']),
                    content="Writing. ",
                )
            )
        },
        {"body": sse(text_stream("Done: notes/a.txt written."))},
    ],
    "bad-arguments": [
        {"body": sse(tool_stream(("call_x", "read_file", ['{"path": '])))},
        {"body": sse(text_stream("Sorry."))},
    ],
    "escape": [
        {"body": sse(tool_stream(("call_e", "read_file", ['{"path": "../../etc/passwd"}'])))},
        {"body": sse(text_stream("Refused."))},
    ],
    "429-then-ok": [
        {
            "status": 429,
            "headers": {"Retry-After": "0"},
            "body": error_body("Rate limit reached for requests", "requests", "rate_limit_exceeded"),
        },
        {"status": 503, "body": b"upstream overloaded"},
        {"body": sse(text_stream("After", " waiting."))},
    ],
    "not-streamed": [
        {
            "json": True,
            "body": completion(
                {
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_j",
                            "type": "function",
                            "function": {"name": "list_dir", "arguments": "{}"},
                        }
                    ],
                },
                "tool_calls",
            ),
        },
        {"json": True, "body": completion({"content": "Empty folder."}, "stop")},
    ],
    "always-500": [{"status": 500, "body": error_body("The server had an error", "server_error")}],
    "400": [
        {
            "status": 400,
            "body": error_body(
                "The model `nope` does not exist or you do not have access to it.",
                "invalid_request_error",
                "model_not_found",
            ),
        }
    ],
    "cut": [
        # The connection ends mid-answer (mid-event, no finish_reason), then one is reset.
        {
            "body": sse([chunk({"role": "assistant", "content": ""}), chunk({"content": "Hel"})], done=False)
            + b'data: {"id": "chatcmpl-te'
        },
        {"raw": sse([chunk({"role": "assistant", "content": "Hello w"})], done=False), "then": "raise"},
        {"body": sse(text_stream("Hello ", "world."))},
    ],
    "endless-tools": [{"body": sse(tool_stream(("call_loop", "list_dir", ["{}"])))}],
    "slow-command": [
        {"body": sse(tool_stream(("call_s", "run_command", ['{"command": "sleep 30"}'])))},
        {"body": sse(text_stream("unreachable"))},
    ],
    "silent-model": [
        {"raw": sse([chunk({"role": "assistant", "content": "Let me"})], done=False), "then": "block"}
    ],
    "restart": [
        {"body": sse(tool_stream(("call_w", "write_file", ['{"path": "out.txt", "content": "1"}'])))},
        {"raw": sse([chunk({"role": "assistant", "content": "Checking"})], done=False), "then": "block"},
        {"body": sse(text_stream("Finished."))},
    ],
}


def make_driver(options: Any) -> Any:
    """The real ``openai`` driver with the scenario ``options["mock"]`` names mocked in."""
    options = dict(options)
    mock = options.pop("mock")
    replies = SCENARIOS[mock["scenario"]]
    log = mock["log"]
    options.setdefault("base_url", URL.rsplit("/chat/completions", 1)[0])

    def answer(request: Any) -> Any:
        count = 0
        if os.path.exists(log):
            with open(log) as f:
                count = sum(1 for _ in f)
        with open(log, "a") as f:
            f.write(
                json.dumps(
                    {"authorization": request.headers.get("Authorization"), "body": json.loads(request.body)}
                )
                + "\n"
            )
        reply = replies[min(count, len(replies) - 1)]
        streamed = reply.get("status", 200) == 200 and not reply.get("json")
        headers = dict(SSE_HEADERS if streamed else {"Content-Type": "application/json"})
        headers.update(reply.get("headers", {}))
        if "raw" in reply:
            body: Any = io.BufferedReader(_Raw(reply["raw"], reply["then"]))
        else:
            body = reply["body"]
        return reply.get("status", 200), headers, body

    mocker = responses.RequestsMock(assert_all_requests_are_fired=False)
    mocker.add_callback(responses.POST, URL, callback=answer)
    mocker.start()  # for the life of the bridge process
    return real_make_driver(options)

"""A scripted model server for tests: one small threaded HTTP server on 127.0.0.1 that speaks,
with streaming, the model APIs real agent CLIs call, and answers each agent request with the
next reply of a script. Nothing here touches the network beyond 127.0.0.1.

APIs (the kind is told by the path; a prefix before it, such as ``/v1`` or ``/api``, is fine):

- Anthropic Messages: ``POST .../messages`` (SSE when ``"stream": true``: ``message_start``,
  ``content_block_start``/``_delta``/``_stop`` with ``text_delta`` and ``input_json_delta``,
  ``message_delta`` with the ``stop_reason``, ``message_stop``; else one JSON message), and
  ``POST .../messages/count_tokens``.
- OpenAI Chat Completions: ``POST .../chat/completions`` (SSE chunks, ``tool_calls`` split
  across chunks, a usage chunk when ``stream_options.include_usage``, ``[DONE]``).
- OpenAI Responses: ``POST .../responses`` (SSE ``response.created``,
  ``response.output_item.added``/``done``, ``response.output_text.delta``,
  ``response.function_call_arguments.delta``, ``response.completed`` with ``usage``).
- Gemini: ``POST .../models/M:streamGenerateContent?alt=sse`` (SSE of
  ``GenerateContentResponse``), ``:generateContent`` (one JSON) and ``:countTokens``.
- ``GET .../models``: a list with one model (``model-server`` and the ids seen so far).
- Anything else: ``404`` with ``{"error": {"type": "not_found", "message": ...}}``; the
  request is recorded (``server.unknown``) so a test can tell what a CLI wanted.

Scripting (provider-neutral: one script works for every API)::

    with ModelServer() as server:
        server.script(shell_call("echo hi > f.txt"), text_quoting_last_tool_output())
        ... run the agent with its base URL at server.url ...
        assert server.agent_requests()[1].tool_outputs() == ["..."]

Requests that offer tools are *agent* requests: each takes the next reply of the queue (an
empty queue answers ``"(model-server: script exhausted)"`` and records the request in
``server.exhausted``). Requests without tools (titles, summaries, a next-speaker check) are
*side* requests: ``server.side_reply`` answers them (default: the text ``"ok"``, or
``{"next_speaker": "user", "reasoning": "done"}`` when JSON output is asked for) and they
never consume the script.

Replies (each a :class:`Reply`; build them with these functions):

- ``text(s, chunks=3)``: an answer of text, streamed in ``chunks`` deltas.
- ``tool_call(name, args)``: a call of the tool ``name`` with the JSON object ``args``.
- ``shell_call(command)``: a call of whatever tool runs shell commands in the request's tool
  list (``Bash``, ``exec_command``, ``shell``, ``run_shell_command``, ``bash``,
  ``run_command``, ...), with the
  command in the argument its schema names (``command`` or ``cmd``; an array when the schema
  says so).
- ``text_quoting_last_tool_output(prefix="Tool output: ")``: text that quotes the output of
  the last tool result in the request (whatever the API's shape of it).
- ``hang(after=reply)``: streams ``after``'s first blocks, then holds the response open
  until :meth:`ModelServer.release` (or 60 s, or the server closes), then finishes it; for
  killing a bridge in the middle of a turn. ``server.hanging`` is set while one is held.
- ``Reply(fn)``: any function of the :class:`Request` returning a list of blocks
  (``Text(s)`` / ``Call(name, args)``).

Every request is in ``server.requests`` (:class:`Request`: ``method``, ``path``, ``query``,
``headers``, ``body``, ``api``, ``kind``), in arrival order, thread-safe to read.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

__all__ = [
    "ModelServer",
    "Request",
    "Reply",
    "Text",
    "Call",
    "text",
    "tool_call",
    "shell_call",
    "text_quoting_last_tool_output",
    "hang",
    "SHELL_TOOLS",
]

SHELL_TOOLS = ("Bash", "exec_command", "shell", "run_shell_command", "bash", "local_shell", "run_command")
"""Names of the tools that run a shell command, in the order :func:`shell_call` prefers them."""

MODEL = "model-server"


# ----------------------------------------------------------------------------- requests


@dataclass
class Request:
    """One request the server received.

    Attributes:
        method: ``GET``, ``POST``...
        path: the URL path (no query).
        query: the query parameters (first value of each).
        headers: header names (lower case) to values.
        body: the parsed JSON body (``None`` when there was none or it was not JSON).
        api: ``anthropic``, ``chat``, ``responses``, ``gemini``, ``models`` or ``unknown``.
        kind: ``agent`` (offered tools: took a scripted reply), ``side`` or ``other``.
    """

    method: str
    path: str
    query: Dict[str, str]
    headers: Dict[str, str]
    body: Any
    api: str
    kind: str = "other"

    def tools(self) -> List[Tuple[str, Dict[str, Any]]]:
        """The tools offered: ``(name, JSON schema of the arguments)`` pairs."""
        body = self.body if isinstance(self.body, dict) else {}
        out: List[Tuple[str, Dict[str, Any]]] = []
        for tool in body.get("tools") or []:
            if not isinstance(tool, dict):
                continue
            if self.api == "gemini":
                for decl in tool.get("functionDeclarations") or tool.get("function_declarations") or []:
                    schema = decl.get("parametersJsonSchema") or decl.get("parameters") or {}
                    out.append((str(decl.get("name")), schema))
            elif isinstance(tool.get("function"), dict):  # chat completions
                fn = tool["function"]
                out.append((str(fn.get("name")), fn.get("parameters") or {}))
            elif "name" in tool:  # anthropic, responses
                schema = tool.get("input_schema") or tool.get("parameters") or {}
                out.append((str(tool["name"]), schema))
            elif tool.get("type") == "local_shell":
                out.append(("local_shell", {}))
        return out

    def tool_outputs(self) -> List[str]:
        """The texts of every tool result in the request's history, oldest first."""
        body = self.body if isinstance(self.body, dict) else {}
        out: List[str] = []
        if self.api == "anthropic":
            for msg in body.get("messages") or []:
                for block in msg.get("content") if isinstance(msg.get("content"), list) else []:
                    if isinstance(block, dict) and block.get("type") == "tool_result":
                        out.append(_flatten(block.get("content")))
        elif self.api == "chat":
            for msg in body.get("messages") or []:
                if isinstance(msg, dict) and msg.get("role") == "tool":
                    out.append(_flatten(msg.get("content")))
        elif self.api == "responses":
            for item in body.get("input") if isinstance(body.get("input"), list) else []:
                if isinstance(item, dict) and item.get("type") in (
                    "function_call_output",
                    "custom_tool_call_output",
                    "local_shell_call_output",
                ):
                    out.append(_flatten(item.get("output")))
        elif self.api == "gemini":
            for content in body.get("contents") or []:
                for part in content.get("parts") or []:
                    resp = part.get("functionResponse") if isinstance(part, dict) else None
                    if isinstance(resp, dict):
                        out.append(_flatten(resp.get("response")))
        return out

    def text(self) -> str:
        """The whole body as JSON text (for ``"needle" in request.text()`` assertions)."""
        return json.dumps(self.body, ensure_ascii=False)


def _flatten(value: Any) -> str:
    """The text of a tool output in any API's shape (str, list of blocks, dict)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(_flatten(v) for v in value)
    if isinstance(value, dict):
        for key in ("text", "output", "content", "result", "llmContent"):
            if key in value:
                return _flatten(value[key])
        return json.dumps(value, ensure_ascii=False)
    return "" if value is None else json.dumps(value)


# ----------------------------------------------------------------------------- replies


@dataclass
class Text:
    """A text block of a reply (streamed in ``chunks`` deltas)."""

    text: str
    chunks: int = 3


@dataclass
class Call:
    """A tool call block of a reply: tool ``name`` with the JSON object ``args``."""

    name: str
    args: Dict[str, Any]
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])


Block = Union[Text, Call]


class Reply:
    """One scripted answer: ``fn(request)`` gives its blocks. ``hold`` (set by :func:`hang`):
    stream the first ``hold`` blocks, then wait for :meth:`ModelServer.release`."""

    def __init__(self, fn: Callable[[Request], Sequence[Block]], hold: Optional[int] = None) -> None:
        self.fn = fn
        self.hold = hold

    def blocks(self, request: Request) -> List[Block]:
        return list(self.fn(request))


def text(s: str, chunks: int = 3) -> Reply:
    """A reply of text ``s``, streamed in ``chunks`` deltas."""
    return Reply(lambda _r: [Text(s, chunks)])


def tool_call(name: str, args: Dict[str, Any], say: Optional[str] = None) -> Reply:
    """A reply that calls tool ``name`` with ``args`` (after the text ``say``, if given)."""
    return Reply(lambda _r: ([Text(say)] if say else []) + [Call(name, dict(args))])


def shell_call(command: str, say: Optional[str] = None) -> Reply:
    """A reply that runs ``command`` with the request's shell tool (see the module docstring).

    Raises (in the server thread, answered as HTTP 500 and recorded in ``server.errors``):
        LookupError: the request offers no shell tool.
    """

    def build(request: Request) -> List[Block]:
        tools = dict(request.tools())
        for name in SHELL_TOOLS:
            if name in tools:
                return ([Text(say)] if say else []) + [Call(name, _shell_args(name, tools[name], command))]
        raise LookupError(f"no shell tool among {sorted(tools)}")

    return Reply(build)


def _shell_args(name: str, schema: Dict[str, Any], command: str) -> Dict[str, Any]:
    props = schema.get("properties") or {}
    if name == "local_shell":
        return {"command": ["bash", "-lc", command]}
    key = "cmd" if "cmd" in props and "command" not in props else "command"
    kind = (props.get(key) or {}).get("type")
    value: Any = ["bash", "-lc", command] if kind == "array" else command
    args: Dict[str, Any] = {key: value}
    if "description" in props:
        args["description"] = "Run a command"
    return args


def text_quoting_last_tool_output(prefix: str = "Tool output: ") -> Reply:
    """A reply of text: ``prefix`` and the last tool output of the request (stripped)."""

    def build(request: Request) -> List[Block]:
        outputs = request.tool_outputs()
        return [Text(prefix + (outputs[-1].strip() if outputs else "(none)"))]

    return Reply(build)


def hang(after: Reply, hold: int = 1) -> Reply:
    """``after``, but held open after its first ``hold`` blocks until the server's
    :meth:`ModelServer.release` (or 60 s)."""
    return Reply(after.fn, hold=hold)


# ----------------------------------------------------------------------------- the server


def _side_default(request: Request) -> List[Block]:
    body = request.body if isinstance(request.body, dict) else {}
    config = body.get("generationConfig") or {}
    fmt = body.get("response_format") or {}
    wants_json = config.get("responseMimeType") == "application/json" or fmt.get("type") in (
        "json_object",
        "json_schema",
    )
    if wants_json:
        return [Text(json.dumps({"next_speaker": "user", "reasoning": "done"}), 1)]
    return [Text("ok", 1)]


class ModelServer:
    """The scripted server (see the module docstring). A context manager: ``__exit__`` stops
    it, releases held responses and joins its threads.

    Attributes:
        url: ``http://127.0.0.1:PORT`` (no path; add ``/v1`` where a CLI wants it).
        requests: every :class:`Request`, in order.
        unknown: requests to unknown endpoints (answered 404).
        exhausted: agent requests that came after the script ran out.
        errors: ``(request, message)`` for replies that failed to build (answered 500).
        side_reply: answers side requests (a function of the request, giving blocks).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: List[Reply] = []
        self.requests: List[Request] = []
        self.unknown: List[Request] = []
        self.exhausted: List[Request] = []
        self.errors: List[Tuple[Request, str]] = []
        self.side_reply: Callable[[Request], Sequence[Block]] = _side_default
        self.hanging = threading.Event()
        self._release = threading.Event()
        self._closed = threading.Event()
        self._count = 0
        server = self

        class Handler(_Handler):
            owner = server

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port: int = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    # -- scripting

    def script(self, *replies: Reply) -> "ModelServer":
        """Append ``replies`` to the queue that agent requests take from, in order."""
        with self._lock:
            self._queue.extend(replies)
        return self

    def pending(self) -> int:
        """How many scripted replies are still waiting."""
        with self._lock:
            return len(self._queue)

    def release(self) -> None:
        """Let every held (:func:`hang`) response finish."""
        self._release.set()

    def agent_requests(self) -> List[Request]:
        """The agent requests (those that offered tools), in order."""
        with self._lock:
            return [r for r in self.requests if r.kind == "agent"]

    # -- life

    def close(self) -> None:
        """Stop serving; held responses end; idempotent."""
        self._closed.set()
        self._release.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

    def __enter__(self) -> "ModelServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- used by the handler

    def _record(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)
            if request.api == "unknown":
                self.unknown.append(request)

    def _next_id(self) -> int:
        with self._lock:
            self._count += 1
            return self._count

    def _take(self, request: Request) -> Tuple[List[Block], Optional[int]]:
        if not request.tools():
            request.kind = "side"
            return list(self.side_reply(request)), None
        request.kind = "agent"
        with self._lock:
            reply = self._queue.pop(0) if self._queue else None
            if reply is None:
                self.exhausted.append(request)
        if reply is None:
            return [Text("(model-server: script exhausted)", 1)], None
        return reply.blocks(request), reply.hold

    def _wait_released(self) -> None:
        self.hanging.set()
        deadline = time.monotonic() + 60
        while not self._release.wait(0.05) and time.monotonic() < deadline:
            pass
        self.hanging.clear()


class _Handler(http.server.BaseHTTPRequestHandler):
    owner: ModelServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    # -- plumbing

    def _parse(self) -> Request:
        url = urllib.parse.urlsplit(self.path)
        query = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        path = url.path
        if path.endswith("/messages/count_tokens"):
            api = "anthropic-count"
        elif path.endswith("/messages"):
            api = "anthropic"
        elif path.endswith("/chat/completions"):
            api = "chat"
        elif path.endswith("/responses"):
            api = "responses"
        elif ":streamGenerateContent" in path or ":generateContent" in path:
            api = "gemini"
        elif ":countTokens" in path:
            api = "gemini-count"
        elif path.rstrip("/").endswith("/models") and self.command == "GET":
            api = "models"
        else:
            api = "unknown"
        headers = {k.lower(): v for k, v in self.headers.items()}
        return Request(self.command, path, query, headers, body, api)

    def _json(self, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _sse_start(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True

    def _sse(self, event: Optional[str], data: Any) -> None:
        payload = data if isinstance(data, str) else json.dumps(data)
        head = f"event: {event}\n" if event else ""
        self.wfile.write(f"{head}data: {payload}\n\n".encode())
        self.wfile.flush()

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def _handle(self) -> None:
        server = self.owner
        request = self._parse()
        server._record(request)
        try:
            if request.api == "unknown":
                message = f"model-server: no endpoint {request.method} {request.path}"
                self._json(404, {"error": {"type": "not_found", "code": 404, "message": message}})
                return
            if request.api == "models":
                models = [{"id": MODEL, "object": "model", "type": "model", "display_name": MODEL}]
                self._json(200, {"object": "list", "data": models, "models": [{"name": f"models/{MODEL}"}]})
                return
            if request.api == "anthropic-count":
                self._json(200, {"input_tokens": 10})
                return
            if request.api == "gemini-count":
                self._json(200, {"totalTokens": 10})
                return
            try:
                blocks, hold = server._take(request)
            except Exception as exc:  # a reply that cannot be built: tell the test
                server.errors.append((request, f"{type(exc).__name__}: {exc}"))
                self._json(500, {"error": {"type": "model_server_error", "message": str(exc)}})
                return
            body = request.body if isinstance(request.body, dict) else {}
            streaming = bool(body.get("stream")) or request.query.get("alt") == "sse" or (
                ":streamGenerateContent" in request.path
            )
            render = _RENDERERS[request.api]
            render(self, request, blocks, hold, streaming)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _hold_point(self, index: int, hold: Optional[int]) -> None:
        if hold is not None and index == hold:
            self.owner._wait_released()


# ----------------------------------------------------------------------------- renderers


def _pieces(s: str, n: int) -> Iterator[str]:
    n = max(1, min(n, len(s) or 1))
    size = -(-len(s) // n) if s else 0
    if not s:
        yield ""
        return
    for i in range(0, len(s), size):
        yield s[i : i + size]


def _usage_tokens(blocks: Sequence[Block]) -> int:
    return sum(len(b.text.split()) if isinstance(b, Text) else 5 for b in blocks) + 1


def _anthropic(
    h: _Handler, request: Request, blocks: List[Block], hold: Optional[int], streaming: bool
) -> None:
    mid = f"msg_{uuid.uuid4().hex[:20]}"
    has_call = any(isinstance(b, Call) for b in blocks)
    stop = "tool_use" if has_call else "end_turn"
    out_tokens = _usage_tokens(blocks)
    usage = {"input_tokens": 10, "output_tokens": out_tokens, "cache_creation_input_tokens": 0,
             "cache_read_input_tokens": 0}
    content = [
        {"type": "text", "text": b.text} if isinstance(b, Text)
        else {"type": "tool_use", "id": f"toolu_{b.id}", "name": b.name, "input": b.args}
        for b in blocks
    ]
    message = {"id": mid, "type": "message", "role": "assistant", "model": MODEL, "content": content,
               "stop_reason": stop, "stop_sequence": None, "usage": usage}
    if not streaming:
        h._json(200, message)
        return
    h._sse_start()
    start = dict(message, content=[], stop_reason=None, usage=dict(usage, output_tokens=1))
    h._sse("message_start", {"type": "message_start", "message": start})
    for i, b in enumerate(blocks):
        h._hold_point(i, hold)
        if isinstance(b, Text):
            h._sse("content_block_start", {"type": "content_block_start", "index": i,
                                           "content_block": {"type": "text", "text": ""}})
            for piece in _pieces(b.text, b.chunks):
                h._sse("content_block_delta", {"type": "content_block_delta", "index": i,
                                               "delta": {"type": "text_delta", "text": piece}})
        else:
            block = {"type": "tool_use", "id": f"toolu_{b.id}", "name": b.name, "input": {}}
            h._sse("content_block_start", {"type": "content_block_start", "index": i, "content_block": block})
            for piece in _pieces(json.dumps(b.args), 3):
                h._sse("content_block_delta", {"type": "content_block_delta", "index": i,
                                               "delta": {"type": "input_json_delta", "partial_json": piece}})
        h._sse("content_block_stop", {"type": "content_block_stop", "index": i})
    h._hold_point(len(blocks), hold)
    h._sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                             "usage": {"output_tokens": out_tokens}})
    h._sse("message_stop", {"type": "message_stop"})


def _chat(h: _Handler, request: Request, blocks: List[Block], hold: Optional[int], streaming: bool) -> None:
    cid = f"chatcmpl-{uuid.uuid4().hex[:20]}"
    created = int(time.time())
    calls = [b for b in blocks if isinstance(b, Call)]
    texts = "".join(b.text for b in blocks if isinstance(b, Text))
    finish = "tool_calls" if calls else "stop"
    out_tokens = _usage_tokens(blocks)
    usage = {"prompt_tokens": 10, "completion_tokens": out_tokens, "total_tokens": 10 + out_tokens}
    if not streaming:
        message: Dict[str, Any] = {"role": "assistant", "content": texts or None}
        if calls:
            message["tool_calls"] = [
                {"id": f"call_{c.id}", "type": "function",
                 "function": {"name": c.name, "arguments": json.dumps(c.args)}} for c in calls
            ]
        h._json(200, {"id": cid, "object": "chat.completion", "created": created, "model": MODEL,
                      "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage})
        return

    def chunk(delta: Dict[str, Any], reason: Optional[str] = None) -> None:
        h._sse(None, {"id": cid, "object": "chat.completion.chunk", "created": created, "model": MODEL,
                      "choices": [{"index": 0, "delta": delta, "finish_reason": reason}]})

    h._sse_start()
    chunk({"role": "assistant", "content": ""})
    call_index = 0
    for i, b in enumerate(blocks):
        h._hold_point(i, hold)
        if isinstance(b, Text):
            for piece in _pieces(b.text, b.chunks):
                chunk({"content": piece})
        else:
            chunk({"tool_calls": [{"index": call_index, "id": f"call_{b.id}", "type": "function",
                                   "function": {"name": b.name, "arguments": ""}}]})
            for piece in _pieces(json.dumps(b.args), 3):
                chunk({"tool_calls": [{"index": call_index, "function": {"arguments": piece}}]})
            call_index += 1
    h._hold_point(len(blocks), hold)
    chunk({}, finish)
    body = request.body if isinstance(request.body, dict) else {}
    if (body.get("stream_options") or {}).get("include_usage"):
        h._sse(None, {"id": cid, "object": "chat.completion.chunk", "created": created, "model": MODEL,
                      "choices": [], "usage": usage})
    h._sse(None, "[DONE]")


def _responses(
    h: _Handler, request: Request, blocks: List[Block], hold: Optional[int], streaming: bool
) -> None:
    rid = f"resp_{uuid.uuid4().hex[:20]}"
    created = int(time.time())
    out_tokens = _usage_tokens(blocks)
    usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": out_tokens,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 10 + out_tokens}
    items: List[Dict[str, Any]] = []
    for b in blocks:
        if isinstance(b, Text):
            items.append({"type": "message", "id": f"msg_{uuid.uuid4().hex[:16]}", "status": "completed",
                          "role": "assistant",
                          "content": [{"type": "output_text", "text": b.text, "annotations": []}]})
        else:
            items.append({"type": "function_call", "id": f"fc_{b.id}", "call_id": f"call_{b.id}",
                          "name": b.name, "arguments": json.dumps(b.args), "status": "completed"})
            if "/" in b.name:  # "NAMESPACE/NAME": a tool of a namespace tool (Codex's MCP tools)
                namespace, _, name = b.name.partition("/")
                items[-1].update(name=name, namespace=namespace)
    base = {"id": rid, "object": "response", "created_at": created, "model": MODEL, "error": None,
            "incomplete_details": None, "instructions": None, "tools": [], "parallel_tool_calls": True,
            "tool_choice": "auto", "metadata": {}}
    if not streaming:
        h._json(200, dict(base, status="completed", output=items, usage=usage))
        return
    h._sse_start()
    seq = iter(range(1, 1_000_000))

    def ev(name: str, data: Dict[str, Any]) -> None:
        h._sse(name, dict(data, type=name, sequence_number=next(seq)))

    ev("response.created", {"response": dict(base, status="in_progress", output=[], usage=None)})
    ev("response.in_progress", {"response": dict(base, status="in_progress", output=[], usage=None)})
    for i, (b, item) in enumerate(zip(blocks, items)):
        h._hold_point(i, hold)
        if isinstance(b, Text):
            ev("response.output_item.added", {"output_index": i,
                                              "item": dict(item, status="in_progress", content=[])})
            part = {"type": "output_text", "text": "", "annotations": []}
            ev("response.content_part.added", {"item_id": item["id"], "output_index": i, "content_index": 0,
                                               "part": part})
            for piece in _pieces(b.text, b.chunks):
                ev("response.output_text.delta", {"item_id": item["id"], "output_index": i,
                                                  "content_index": 0, "delta": piece, "logprobs": []})
            ev("response.output_text.done", {"item_id": item["id"], "output_index": i, "content_index": 0,
                                             "text": b.text, "logprobs": []})
            ev("response.content_part.done", {"item_id": item["id"], "output_index": i, "content_index": 0,
                                              "part": dict(part, text=b.text)})
        else:
            ev("response.output_item.added", {"output_index": i,
                                              "item": dict(item, status="in_progress", arguments="")})
            for piece in _pieces(item["arguments"], 3):
                ev("response.function_call_arguments.delta", {"item_id": item["id"], "output_index": i,
                                                              "delta": piece})
            ev("response.function_call_arguments.done", {"item_id": item["id"], "output_index": i,
                                                         "arguments": item["arguments"]})
        ev("response.output_item.done", {"output_index": i, "item": item})
    h._hold_point(len(blocks), hold)
    ev("response.completed", {"response": dict(base, status="completed", output=items, usage=usage)})


def _gemini(h: _Handler, request: Request, blocks: List[Block], hold: Optional[int], streaming: bool) -> None:
    out_tokens = _usage_tokens(blocks)
    usage = {"promptTokenCount": 10, "candidatesTokenCount": out_tokens, "totalTokenCount": 10 + out_tokens}

    def response(parts: List[Dict[str, Any]], finish: Optional[str]) -> Dict[str, Any]:
        cand: Dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        if finish:
            cand["finishReason"] = finish
        return {"candidates": [cand], "usageMetadata": usage, "modelVersion": MODEL,
                "responseId": uuid.uuid4().hex[:16]}

    def parts_of(b: Block) -> List[Dict[str, Any]]:
        if isinstance(b, Text):
            return [{"text": piece} for piece in _pieces(b.text, b.chunks)]
        return [{"functionCall": {"id": f"call_{b.id}", "name": b.name, "args": b.args}}]

    if not streaming:
        whole: List[Dict[str, Any]] = []
        for b in blocks:
            whole += [{"text": b.text}] if isinstance(b, Text) else parts_of(b)
        h._json(200, response(whole, "STOP"))
        return
    h._sse_start()
    for i, b in enumerate(blocks):
        h._hold_point(i, hold)
        for part in parts_of(b):
            h._sse(None, response([part], None))
    h._hold_point(len(blocks), hold)
    h._sse(None, response([{"text": ""}], "STOP"))


_RENDERERS: Dict[str, Callable[[_Handler, Request, List[Block], Optional[int], bool], None]] = {
    "anthropic": _anthropic,
    "chat": _chat,
    "responses": _responses,
    "gemini": _gemini,
}

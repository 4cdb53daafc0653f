"""The ``openai`` driver: a coding agent loop over any OpenAI-compatible Chat Completions
endpoint (OpenAI, vLLM, Ollama, llama.cpp server), streamed with server-sent events, with
workspace tools (:mod:`bridge_client.drivers.tools`: ``run_command``, ``read_file``,
``write_file``, ``list_dir``).

Where the format comes from: the Chat Completions streaming format of the OpenAI API
reference ("Create chat completion", ``stream: true``: ``data: {chat.completion.chunk}``
lines, ``choices[].delta`` with ``content`` and ``tool_calls[]`` fragments keyed by
``index``, ``finish_reason``, a last chunk with ``usage`` when
``stream_options.include_usage``, then ``data: [DONE]``), as the ``openai/openai-python``
SDK reads it (``src/openai/_streaming.py``: an SSE event per blank-line-separated block,
``data:`` lines joined, ``[DONE]`` ends). ``delta.reasoning_content`` (vLLM, DeepSeek) and
``delta.reasoning`` (Ollama, OpenRouter) carry reasoning.

One step is one model call plus the tool calls it asked for:

- ``delta.content`` → ``text-delta``, as it streams; ``delta.reasoning_content`` /
  ``delta.reasoning`` → ``reasoning-delta``.
- When the answer is complete, each tool call (its fragments joined by ``index``) →
  ``tool-call`` (``input``: the parsed arguments, or the raw text when they are not JSON),
  then runs in order → ``tool-result``.
- ``step-finish`` with the call's ``finish_reason`` (``tool_calls`` or ``stop`` ...) and its
  ``usage``.

The loop ends when the model answers without tool calls (``turn-finish`` ``stop``) or after
``max_steps`` steps (``max-steps``); the turn's usage sums the steps'.

HTTP errors: a connection error, a timeout, 429 and 5xx are retried with exponential backoff
(tenacity, ``max_retries`` times, ``Retry-After`` honoured up to ``backoff_max``), each
retry announced by a ``data`` part ``openai-retry`` (the error, the try, the wait); any other
4xx ends the turn with ``turn-finish`` ``error`` and the endpoint's message. A stream cut
mid-answer (no ``finish_reason``, or a broken connection) abandons the step's attempt with
``step-reset`` and runs the step again (at most ``max_retries`` times). Cancel closes the
model stream, or kills a running command, at once.

What survives a restart: the conversation (``{"messages": [...]}``, without the
system prompt) is the session state, stored before each ``step-finish``, so a fresh bridge
goes on with the same conversation, and a turn continued after a restart re-runs only its
unfinished step.

The API key is never an option: ``api_key_env`` names the environment variable that holds
it (``agent_options`` are stored in the sandbox and hashed into the bridge id), read at each
request from the session's environment (``CreateSessionOptions.env``), else the bridge's
own. A key is required for the default endpoint and whenever ``api_key_env`` is given: a
turn without it ends at once with ``error`` naming the variable. With only ``base_url`` (a
local server) a missing key sends no ``Authorization``. A ``base_url`` whose host name does
not resolve ends the turn at once too (it is not retried like a busy server).

Options (``agent_options``, a JSON object):
    model: the model name (required).
    base_url: the API root, e.g. ``http://localhost:11434/v1`` (default
        ``https://api.openai.com/v1``); requests go to ``{base_url}/chat/completions``.
    api_key_env: the variable holding the key (default ``OPENAI_API_KEY``).
    max_steps: integer >= 1 (default 20). temperature: number >= 0 (default: the server's).
    system: the system prompt (default: a short coding-agent prompt).
    max_retries: integer >= 0 (default 5). backoff_initial, backoff_max: seconds (default 1
        and 30). request_timeout: seconds to connect and between two reads of the stream
        (default 300). command_timeout: the longest a ``run_command`` may take, seconds
        (default 300). max_output: characters of a tool's output kept (default 20000).
    include_usage: send ``stream_options.include_usage`` (default true; some older servers
        refuse it).
"""

from __future__ import annotations

import json
import os
import queue
import socket
import threading
import urllib.parse
from typing import Any, Dict, Iterable, Iterator, List, NamedTuple, Optional, Tuple

import requests
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_when_event_set,
    wait_exponential,
)

from ..bridge.driver import TurnContext, TurnResult
from ..driver_options import check_agent_options
from .cli_process import summarize
from .tools import TOOL_SPECS, run_tool

__all__ = ["OpenAIChatDriver", "make_driver", "DEFAULT_SYSTEM", "sse_data", "byte_lines"]

DEFAULT_SYSTEM = (
    "You are a coding agent working in a workspace folder. Use the tools to inspect and change "
    "files and to run commands; paths are relative to the workspace. When the task is done, "
    "answer with a short summary and no tool call."
)

_CONNECT_TIMEOUT = 10.0


def _cause(exc: BaseException) -> str:
    """``"ConnectionError ([Errno 111] Connection refused)"``: the error's type and, when a
    system error lies under it (urllib3 wraps the socket's), that error's errno and text."""
    todo: List[BaseException] = [exc]
    seen: set[int] = set()
    while todo:
        err = todo.pop(0)
        if id(err) in seen:
            continue
        seen.add(id(err))
        if isinstance(err, OSError) and isinstance(err.errno, int) and err.strerror:
            return f"{type(exc).__name__} ([Errno {err.errno}] {err.strerror})"
        linked = (err.__cause__, err.__context__, getattr(err, "reason", None), *err.args)
        todo += [e for e in linked if isinstance(e, BaseException)]
    return type(exc).__name__


def _unresolved(exc: BaseException) -> Optional[str]:
    """The resolver's message when the error under ``exc`` is a host name that does not
    resolve (``socket.gaierror``), else ``None``: such an error ends the turn at once, as a
    wrong URL, instead of being retried like a busy server."""
    todo: List[BaseException] = [exc]
    seen: set[int] = set()
    while todo:
        err = todo.pop(0)
        if id(err) in seen:
            continue
        seen.add(id(err))
        if isinstance(err, socket.gaierror):
            return str(err.strerror or err)
        linked = (err.__cause__, err.__context__, getattr(err, "reason", None), *err.args)
        todo += [e for e in linked if isinstance(e, BaseException)]
    return None


class _Retryable(Exception):
    """A failure worth another try: a connection error, a timeout, 429 or 5xx."""

    def __init__(self, message: str, retry_after: Optional[float] = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class _Fatal(Exception):
    """A failure that ends the turn (a 4xx other than 429, an answer that is not a stream)."""


class _Cut(Exception):
    """The stream ended before the answer was complete."""


class _Answer(NamedTuple):
    """One model call's answer: its text, tool calls ``[(id, name, arguments text)]``,
    finish reason and usage."""

    text: str
    tool_calls: List[Tuple[str, str, str]]
    finish_reason: str
    usage: Any


def sse_data(lines: Iterator[bytes]) -> Iterator[str]:
    """The ``data`` of each server-sent event in ``lines`` (one line each, without newlines),
    as the SSE standard reads them: ``data:`` fields of one event joined by newlines, an
    event ending at a blank line, comments (``:``) and other fields skipped.

    Yields:
        Each event's data text (``[DONE]`` included).
    """
    data: List[str] = []
    for raw in lines:
        line = raw.decode("utf-8", "replace")
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if name == "data":
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        yield "\n".join(data)


def _retry_after(response: requests.Response) -> Optional[float]:
    value = response.headers.get("Retry-After")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _error_message(response: requests.Response) -> str:
    """The endpoint's own message (``error.message`` of the JSON body), else the body's start."""
    try:
        body = response.json()
    except ValueError:
        return summarize(response.text or response.reason or "")
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return summarize(err["message"])
        if isinstance(err, str):
            return summarize(err)
        if body.get("message"):
            return summarize(body["message"])
    return summarize(json.dumps(body))


class OpenAIChatDriver:
    """The OpenAI-compatible coding agent (``agent_id`` ``"openai"``); see the module docstring.

    Args:
        options: the checked options (see :func:`make_driver`).
    """

    agent_id = "openai"

    def __init__(self, options: Dict[str, Any]) -> None:
        self.model: str = options["model"]
        self.base_url: str = options.get("base_url", "https://api.openai.com/v1").rstrip("/")
        self.api_key_env: str = options.get("api_key_env", "OPENAI_API_KEY")
        # A key is needed by the default endpoint and whenever api_key_env is named; a local
        # server given by base_url alone may go without.
        self.key_required: bool = "api_key_env" in options or "base_url" not in options
        self.max_steps: int = options.get("max_steps", 20)
        self.temperature: Optional[float] = options.get("temperature")
        self.system: str = options.get("system") or DEFAULT_SYSTEM
        self.max_retries: int = options.get("max_retries", 5)
        self.backoff_initial: float = float(options.get("backoff_initial", 1.0))
        self.backoff_max: float = float(options.get("backoff_max", 30.0))
        self.request_timeout: float = float(options.get("request_timeout", 300.0))
        self.command_timeout: float = float(options.get("command_timeout", 300.0))
        self.max_output: int = options.get("max_output", 20000)
        self.include_usage: bool = options.get("include_usage", True)
        self._http = requests.Session()

    def initial_state(self) -> Any:
        """A new session's data: ``{"messages": []}`` (the conversation, without the system prompt)."""
        return {"messages": []}

    # ------------------------------------------------------------------ the loop

    def run_turn(self, ctx: TurnContext) -> TurnResult:
        """Run model calls and tools until the model stops calling tools or ``max_steps``.

        Returns:
            ``stop``, ``max-steps``, ``cancelled``, or ``error`` with the endpoint's message.
        """
        if self.key_required and not self._key(ctx):
            return TurnResult("error", None, self._missing_key())
        data = ctx.state.data
        messages: List[Any] = list(data.get("messages", [])) if isinstance(data, dict) else []
        if ctx.completed_steps == 0:
            messages.append({"role": "user", "content": ctx.prompt})
        total: Dict[str, int] = {}
        for _ in range(ctx.completed_steps, self.max_steps):
            if ctx.cancelled.is_set():
                return TurnResult("cancelled")
            try:
                answer = self._step(ctx, messages)
            except _Fatal as exc:
                if ctx.step is not None:
                    ctx.finish_step("error")
                return TurnResult("error", total or None, str(exc))
            if answer is None:  # cancelled (the runner closes an open step)
                return TurnResult("cancelled")
            _add_usage(total, answer.usage)
            assistant: Dict[str, Any] = {"role": "assistant", "content": answer.text or None}
            if answer.tool_calls:
                assistant["tool_calls"] = [
                    {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                    for cid, name, args in answer.tool_calls
                ]
            messages.append(assistant)
            for cid, name, args in answer.tool_calls:
                try:
                    parsed = json.loads(args) if args.strip() else {}
                except ValueError as exc:
                    ctx.tool_call(cid, name, args)
                    output: Any = f"the arguments are not valid JSON ({exc}); call the tool again"
                    is_error = True
                else:
                    ctx.tool_call(cid, name, parsed)
                    output, is_error = run_tool(
                        name, parsed, os.getcwd(), ctx.cancelled, self.command_timeout, self.max_output
                    )
                ctx.tool_result(cid, name, output, is_error)
                content = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
                messages.append({"role": "tool", "tool_call_id": cid, "content": content})
                if ctx.cancelled.is_set():
                    break
            ctx.set_state({"messages": messages})  # checkpointed by finish_step (B05)
            ctx.finish_step(answer.finish_reason, answer.usage)
            if ctx.cancelled.is_set():
                return TurnResult("cancelled", total or None)
            if not answer.tool_calls:
                return TurnResult("stop", total or None)
        return TurnResult("max-steps", total or None)

    def _key(self, ctx: TurnContext) -> Optional[str]:
        """The API key: the session's variable ``api_key_env`` first, then the bridge's own."""
        return ctx.env.get(self.api_key_env) or os.environ.get(self.api_key_env) or None

    def _missing_key(self) -> str:
        name = self.api_key_env
        return (
            f"{name} is not set: the model endpoint {self.base_url} needs an API key; give the "
            f"session the variable (CreateSessionOptions(env={{'{name}': Redacted(...)}}), or "
            f"bridge-client run --env {name}), or set it in the sandbox's environment"
        )

    def _step(self, ctx: TurnContext, messages: List[Any]) -> Optional[_Answer]:
        """Open a step and stream one model answer into it; on a cut, ``step-reset`` and again.

        Returns:
            The complete answer (the step still open), or ``None`` when cancelled.

        Raises:
            _Fatal: a 4xx, an answer that is not a stream, or retries used up.
        """
        cuts = 0
        while True:
            ctx.start_step()
            try:
                return self._call(ctx, messages)
            except _Cut as exc:
                if ctx.cancelled.is_set():
                    return None
                cuts += 1
                ctx.reset_step(f"model stream cut: {exc}")
                if cuts > self.max_retries:
                    raise _Fatal(f"the model stream was cut {cuts} times; last: {exc}") from None
                if ctx.cancelled.wait(min(self.backoff_max, self.backoff_initial * 2 ** (cuts - 1))):
                    return None

    def _request(self, messages: List[Any]) -> Dict[str, Any]:
        body: Dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "system", "content": self.system}] + messages,
            "tools": TOOL_SPECS,
            "stream": True,
        }
        if self.include_usage:
            body["stream_options"] = {"include_usage": True}
        if self.temperature is not None:
            body["temperature"] = self.temperature
        return body

    def _open(self, ctx: TurnContext, messages: List[Any]) -> Optional[requests.Response]:
        """POST the request with retries (tenacity); return the streaming response, or ``None``
        when cancelled. Raises :class:`_Fatal`."""
        headers = {"Accept": "text/event-stream"}
        key = self._key(ctx)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        body = self._request(messages)

        def attempt() -> requests.Response:
            if ctx.cancelled.is_set():  # cancelled during the backoff: no new request
                raise _Retryable("cancelled")
            try:
                response = self._http.post(
                    f"{self.base_url}/chat/completions",
                    json=body,
                    headers=headers,
                    stream=True,
                    timeout=(_CONNECT_TIMEOUT, self.request_timeout),
                )
            except (requests.ConnectionError, requests.Timeout) as exc:
                unresolved = _unresolved(exc)
                if unresolved is not None:
                    host = urllib.parse.urlsplit(self.base_url).hostname or self.base_url
                    raise _Fatal(
                        f"the host name {host!r} of {self.base_url} does not resolve ({unresolved}): "
                        "check base_url, or the sandbox's DNS"
                    ) from None
                raise _Retryable(f"cannot reach {self.base_url}: {_cause(exc)}") from None
            except requests.RequestException as exc:
                raise _Fatal(f"request to {self.base_url} failed: {exc}") from None
            if response.status_code == 429 or response.status_code >= 500:
                message = f"{response.status_code} {response.reason}: {_error_message(response)}"
                after = _retry_after(response)
                response.close()
                raise _Retryable(message, after)
            if response.status_code >= 400:
                message = _error_message(response)
                response.close()
                hint = (
                    f" (is {self.api_key_env} set in the sandbox?)"
                    if response.status_code in (401, 403)
                    else ""
                )
                raise _Fatal(
                    f"model endpoint answered {response.status_code} {response.reason}: {message}{hint}"
                )
            return response

        exponential = wait_exponential(multiplier=self.backoff_initial, max=self.backoff_max)

        def wait(state: RetryCallState) -> float:
            exc = state.outcome.exception() if state.outcome else None
            after = exc.retry_after if isinstance(exc, _Retryable) else None
            return min(self.backoff_max, after) if after is not None else float(exponential(state))

        def announce(state: RetryCallState) -> None:
            # A data part per retry, so that a client shows why the turn is quiet.
            exc = state.outcome.exception() if state.outcome else None
            seconds = state.next_action.sleep if state.next_action else 0.0
            ctx.data(
                "openai-retry",
                f"{exc}; try {state.attempt_number + 1} of {self.max_retries + 1} in {seconds:.3g} s",
            )

        retrying = Retrying(
            retry=retry_if_exception(lambda e: isinstance(e, _Retryable) and not ctx.cancelled.is_set()),
            stop=stop_after_attempt(self.max_retries + 1) | stop_when_event_set(ctx.cancelled),
            wait=wait,
            before_sleep=announce,
            sleep=lambda seconds: _pause(ctx.cancelled, seconds),
            reraise=True,
        )
        try:
            response = retrying(attempt)
        except _Retryable as exc:
            if ctx.cancelled.is_set():
                return None
            raise _Fatal(f"model endpoint failed after {self.max_retries + 1} tries: {exc}") from None
        if ctx.cancelled.is_set():
            response.close()
            return None
        return response

    def _call(self, ctx: TurnContext, messages: List[Any]) -> Optional[_Answer]:
        """One model call, streamed into the open step. Raises :class:`_Cut`, :class:`_Fatal`.

        The stream is read by a reader thread that queues its events; this thread emits them
        and watches the cancel event, so a cancel returns at once even while the read
        blocks (the socket is shut down to end that read; the reader then exits by itself).
        """
        response = self._open(ctx, messages)
        if response is None:
            return None
        events: "queue.Queue[Tuple[str, Any]]" = queue.Queue()
        reader = threading.Thread(
            target=_read_stream, args=(response, events), name="openai-stream", daemon=True
        )
        reader.start()
        text: List[str] = []
        calls: Dict[int, List[str]] = {}
        finish: Optional[str] = None
        usage: Any = None
        carry: Optional[Tuple[str, Any]] = None
        while True:
            if ctx.cancelled.is_set():
                _abort(response)
                return None
            if carry is not None:
                (kind, value), carry = carry, None
            else:
                try:
                    kind, value = events.get(timeout=0.05)
                except queue.Empty:
                    continue
            if kind == "end":
                break
            if kind == "cut":
                reader.join(1.0)
                raise _Cut(value)
            # The chunks already queued behind this one (one network read often holds several)
            # go to the log as one batch of text deltas (ctx.texts): the same parts, one hand-off.
            batch = [value]
            while True:
                try:
                    more = events.get_nowait()
                except queue.Empty:
                    break
                if more[0] != "chunk":
                    carry = more  # "end" or "cut": handled on the next pass
                    break
                batch.append(more[1])
            pending: List[str] = []
            try:
                for value in batch:
                    self._apply(ctx, value, text, calls, pending)
                _flush(ctx, pending)
            except BaseException:  # the bridge is stopping, or ctx refused a part
                _abort(response)
                raise
            for value in batch:
                if value.get("usage"):
                    usage = value["usage"]
                for choice in value.get("choices") or []:
                    if isinstance(choice, dict) and choice.get("index", 0) == 0 and choice.get(
                        "finish_reason"
                    ):
                        finish = str(choice["finish_reason"])
        reader.join(1.0)
        if finish is None:
            raise _Cut("the stream ended before a finish_reason")
        tool_calls = [
            (parts[0] or f"call_{ctx.step}_{i}", parts[1], parts[2])
            for i, parts in sorted(calls.items())
            if parts[1]
        ]
        return _Answer("".join(text), tool_calls, finish, usage)

    @staticmethod
    def _apply(
        ctx: TurnContext,
        chunk: Dict[str, Any],
        text: List[str],
        calls: Dict[int, List[str]],
        pending: Optional[List[str]] = None,
    ) -> None:
        """Emit one chunk's deltas (choice 0) and join its tool-call fragments into ``calls``.
        With ``pending``, text deltas are added to it (the caller emits them with
        :func:`_flush`) and any other part flushes it first, so the order stays the stream's."""
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            for key in ("reasoning_content", "reasoning"):
                if isinstance(delta.get(key), str) and delta[key]:
                    if pending:
                        _flush(ctx, pending)
                    ctx.reasoning(delta[key])
            if isinstance(delta.get("content"), str) and delta["content"]:
                text.append(delta["content"])
                if pending is None:
                    ctx.text(delta["content"])
                else:
                    pending.append(delta["content"])
            for frag in delta.get("tool_calls") or []:
                _add_fragment(calls, frag)


def _flush(ctx: TurnContext, pending: List[str]) -> None:
    """Emit the text deltas gathered in ``pending`` (one ``ctx.text``, or one ``ctx.texts``
    for several) and empty it."""
    if len(pending) == 1:
        ctx.text(pending[0])
    elif pending:
        ctx.texts(pending)
    pending.clear()


def _read_stream(response: requests.Response, events: "queue.Queue[Tuple[str, Any]]") -> None:
    """The reader thread: queue ``("chunk", dict)`` for each JSON chunk, then ``("end", None)``
    after ``[DONE]`` or the end of the body, or ``("cut", why)`` when the stream breaks or
    carries an error object. A server that ignored ``stream: true`` and answered with one JSON
    completion is read as a single chunk."""
    try:
        if response.headers.get("Content-Type", "").split(";")[0].strip() == "application/json":
            events.put(("chunk", _as_chunk(response.json())))
            events.put(("end", None))
            return
        for payload in sse_data(byte_lines(_arriving(response))):
            if payload.strip() == "[DONE]":
                break
            try:
                chunk = json.loads(payload)
            except ValueError:
                continue  # a keep-alive or a vendor line that is not JSON
            if not isinstance(chunk, dict):
                continue
            if chunk.get("error"):
                err = chunk["error"]
                events.put(
                    (
                        "cut",
                        f"error in stream: {summarize(err.get('message') if isinstance(err, dict) else err)}",
                    )
                )
                return
            events.put(("chunk", chunk))
        events.put(("end", None))
    except Exception as exc:  # requests/urllib3 errors, a socket shut down by a cancel
        events.put(("cut", f"{type(exc).__name__}: {summarize(exc, 120)}"))
    finally:
        try:
            response.close()
        except Exception:
            pass


def _arriving(response: requests.Response) -> Iterator[bytes]:
    """The body's bytes as they arrive. urllib3 2's ``read1`` returns what one read of the
    socket gives, chunked or not; ``iter_content(None)`` would wait for the whole body of a
    stream that is not chunked. With urllib3 1.26 (no ``read1``), ``iter_content(None)`` is
    the best there is: its chunked reads still yield each chunk as it comes."""
    read1 = getattr(response.raw, "read1", None)
    if read1 is None:
        yield from response.iter_content(chunk_size=None)
        return
    while True:
        data = read1(65536, decode_content=True)
        if not data:
            return
        yield data


def _as_chunk(completion: Any) -> Dict[str, Any]:
    """A whole ``chat.completion`` (not streamed) as one stream chunk: ``message`` becomes the
    ``delta`` (tool calls numbered by ``index``), with its ``finish_reason`` and ``usage``.

    Raises:
        ValueError: not a completion (the step is then run again, as for a cut stream).
    """
    if not isinstance(completion, dict) or not isinstance(completion.get("choices"), list):
        raise ValueError("a JSON answer that is not a chat completion")
    choices = []
    for choice in completion["choices"]:
        if not isinstance(choice, dict):
            continue
        delta = dict(choice.get("message") or {})
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            delta["tool_calls"] = [dict(c, index=i) for i, c in enumerate(calls) if isinstance(c, dict)]
        choices.append(
            {"index": choice.get("index", 0), "delta": delta, "finish_reason": choice.get("finish_reason")}
        )
    return {"choices": choices, "usage": completion.get("usage")}


def _abort(response: requests.Response) -> None:
    """Best effort: shut the stream's socket down so a blocked read ends now (cancel).

    The socket is urllib3's connection's, or, for a response that ends when the server closes
    (http.client then hands the socket over to the response), the one under the response's
    file. Closing the response instead would block on the reader's buffer lock.
    """
    raw = response.raw
    candidates = [
        getattr(getattr(raw, "_connection", None), "sock", None),
        getattr(getattr(getattr(getattr(raw, "_fp", None), "fp", None), "raw", None), "_sock", None),
    ]
    for sock in candidates:
        if isinstance(sock, socket.socket):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return


def _pause(cancelled: threading.Event, seconds: float) -> None:
    """Tenacity's sleep: wait ``seconds``, cut short by a cancel."""
    cancelled.wait(seconds)


def byte_lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    r"""Split a byte stream into lines (without ``\n``, ``\r\n`` or ``\r``), as they arrive.

    ``requests``' own ``iter_lines`` splits each chunk on its own and yields an extra blank
    line when a ``\r\n`` falls across two chunks, which would end a server-sent event
    early; this keeps a trailing ``\r`` until the next chunk says what follows it.
    """
    buffer = b""
    for chunk in chunks:
        if not chunk:
            continue
        buffer += chunk
        while True:
            found = [i for i in (buffer.find(b"\n"), buffer.find(b"\r")) if i >= 0]
            if not found:
                break
            cut = min(found)
            if buffer[cut] == 0x0D and cut + 1 == len(buffer):
                break  # a CR at the end: wait to see whether LF follows
            line, width = buffer[:cut], 2 if buffer[cut : cut + 2] == b"\r\n" else 1
            buffer = buffer[cut + width :]
            yield line
    if buffer:
        yield buffer.rstrip(b"\r")


def _add_fragment(calls: Dict[int, List[str]], frag: Any) -> None:
    """Join one ``delta.tool_calls[]`` fragment into ``calls[index] = [id, name, arguments]``."""
    if not isinstance(frag, dict):
        return
    index = frag.get("index", len(calls))
    if not isinstance(index, int):
        return
    entry = calls.setdefault(index, ["", "", ""])
    if isinstance(frag.get("id"), str) and frag["id"]:
        entry[0] = frag["id"]
    function = frag.get("function") or {}
    if isinstance(function, dict):
        if isinstance(function.get("name"), str) and function["name"] and not entry[1]:
            entry[1] = function["name"]
        if isinstance(function.get("arguments"), str):
            entry[2] += function["arguments"]


def _add_usage(total: Dict[str, int], usage: Any) -> None:
    if isinstance(usage, dict):
        for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
            value = usage.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                total[key] = total.get(key, 0) + value


def make_driver(options: Any) -> OpenAIChatDriver:
    """Make the openai driver from its options (see the module docstring).

    Raises:
        ValueError: an option is unknown, missing (``model``) or of the wrong type, or an API
            key was put in the options.
    """
    opts = check_agent_options("openai", options)  # the same check bridge_options() makes
    return OpenAIChatDriver(opts)

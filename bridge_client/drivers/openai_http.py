"""The HTTP and server-sent-events side of the ``openai`` driver
(:mod:`bridge_client.drivers.openai_chat`): the POST of one model call with retries
(tenacity: connection errors, timeouts, 429 and 5xx, ``Retry-After`` honoured), the endpoint's
error messages, and the reader thread that turns the streamed body into JSON chunks.

Nothing here knows the tool loop: the driver hands a request body in and reads chunks out.
"""

from __future__ import annotations

import json
import queue
import socket
import threading
import urllib.parse
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

import requests
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_when_event_set,
    wait_exponential,
)

from ..bridge.driver import TurnContext
from .cli_process import summarize

__all__ = ["ChatEndpoint", "sse_data", "byte_lines"]

_CONNECT_TIMEOUT = 10.0


def _under(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every error under it (causes, contexts, urllib3's ``reason``, errors among
    the arguments), breadth first, each once."""
    todo: List[BaseException] = [exc]
    seen: set[int] = set()
    while todo:
        err = todo.pop(0)
        if id(err) in seen:
            continue
        seen.add(id(err))
        yield err
        linked = (err.__cause__, err.__context__, getattr(err, "reason", None), *err.args)
        todo += [e for e in linked if isinstance(e, BaseException)]


def _cause(exc: BaseException) -> str:
    """``"ConnectionError ([Errno 111] Connection refused)"``: the error's type and, when a
    system error lies under it (urllib3 wraps the socket's), that error's errno and text."""
    for err in _under(exc):
        if isinstance(err, OSError) and isinstance(err.errno, int) and err.strerror:
            return f"{type(exc).__name__} ([Errno {err.errno}] {err.strerror})"
    return type(exc).__name__


def _unresolved(exc: BaseException) -> Optional[str]:
    """The resolver's message when the error under ``exc`` is a host name that does not
    resolve (``socket.gaierror``), else ``None``: such an error ends the turn at once, as a
    wrong URL, instead of being retried like a busy server."""
    for err in _under(exc):
        if isinstance(err, socket.gaierror):
            return str(err.strerror or err)
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


class ChatEndpoint:
    """A Chat Completions endpoint and how to call it: ``{base_url}/chat/completions``, POSTed
    with retries and exponential backoff.

    Args:
        base_url: the API root, without a trailing ``/``.
        api_key_env: the variable that holds the key (named in the hint of a 401 or 403).
        max_retries: retries after the first try (>= 0).
        backoff_initial, backoff_max: the backoff's first and longest wait, seconds.
        request_timeout: seconds between two reads of the stream.
    """

    def __init__(
        self,
        base_url: str,
        api_key_env: str,
        max_retries: int,
        backoff_initial: float,
        backoff_max: float,
        request_timeout: float,
    ) -> None:
        self.base_url = base_url
        self.api_key_env = api_key_env
        self.max_retries = max_retries
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.request_timeout = request_timeout
        self._http = requests.Session()

    def open(self, ctx: TurnContext, body: Dict[str, Any], key: Optional[str]) -> Optional[requests.Response]:
        """POST the request ``body`` (with ``key`` as the bearer token, when given) with
        retries (tenacity), each announced by a ``data`` part ``openai-retry``; return the
        streaming response, or ``None`` when cancelled. Raises :class:`_Fatal`."""
        headers = {"Accept": "text/event-stream"}
        if key:
            headers["Authorization"] = f"Bearer {key}"

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

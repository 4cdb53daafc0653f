"""JSON-RPC 2.0 over an ACP agent's stdio: the transport of the ``acp`` driver.

The Agent Client Protocol's stdio transport is one JSON-RPC message per line, both ways
(agentclientprotocol.com, "Transports"). :class:`AcpConnection` sends requests and
notifications to the agent through a :class:`~bridge_client.drivers.cli_process.JsonLinesProcess`
and reads its lines in the calling thread only: :meth:`AcpConnection.request` waits for the
answer to one request while it hands every other message (the agent's notifications and its
own requests) to a handler, in the order they came, so the driver emits parts and answers
the agent from the turn's thread.
"""
from __future__ import annotations

import json
import time
from typing import Any, Callable, Dict, Optional

from .cli_process import Event, JsonLinesProcess

__all__ = ["AcpConnection", "RpcError", "AgentExited", "METHOD_NOT_FOUND", "INTERNAL_ERROR"]

METHOD_NOT_FOUND = -32601
INTERNAL_ERROR = -32603
INVALID_PARAMS = -32602
RESOURCE_NOT_FOUND = -32002
AUTH_REQUIRED = -32000

_TICK = 0.05
"""Seconds between checks of ``poll`` while the agent is silent."""


class RpcError(Exception):
    """The agent answered a request with a JSON-RPC error.

    Attributes:
        code: the error's code (``-32000`` is ACP's "authentication required").
        message: its message. data: its ``data`` (any JSON, maybe ``None``).
    """

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def __str__(self) -> str:
        detail = ""
        if isinstance(self.data, str) and self.data:
            detail = f": {self.data}"
        elif isinstance(self.data, dict) and isinstance(self.data.get("details"), str):
            detail = f": {self.data['details']}"
        return f"{self.message}{detail} (JSON-RPC error {self.code})"


class AgentExited(Exception):
    """The agent closed its stdout (it exited, or was killed) before answering."""


Handler = Callable[[Dict[str, Any]], None]
"""Called with each message that is not the awaited answer: a notification
(``{"method", "params"}``) or a request of the agent (``{"id", "method", "params"}``), which
the handler answers with :meth:`AcpConnection.respond` or :meth:`AcpConnection.respond_error`."""


class AcpConnection:
    """A JSON-RPC client (and server of the client-side methods) over an agent process.

    Not thread-safe for reading: one thread at a time calls :meth:`request` or :meth:`drain`.
    Writing (:meth:`notify`, :meth:`respond`) is safe from any thread.

    Args:
        proc: the agent, started with its stdin kept open.
    """

    def __init__(self, proc: JsonLinesProcess) -> None:
        self.proc = proc
        self._next_id = 0
        self.gone = False  # its stdout ended (the end is read only once)

    # ------------------------------------------------------------------ writing

    def _send(self, message: Dict[str, Any]) -> None:
        line = json.dumps({"jsonrpc": "2.0", **message}, ensure_ascii=False, separators=(",", ":"))
        if not self.proc.write(line + "\n"):
            raise AgentExited("the agent's stdin is closed")

    def notify(self, method: str, params: Any) -> None:
        """Send a notification (no answer). Raises :class:`AgentExited` when stdin is gone."""
        self._send({"method": method, "params": params})

    def respond(self, request_id: Any, result: Any) -> None:
        """Answer one of the agent's requests with ``result``; a gone agent is ignored."""
        try:
            self._send({"id": request_id, "result": result})
        except AgentExited:
            pass

    def respond_error(self, request_id: Any, code: int, message: str) -> None:
        """Answer one of the agent's requests with an error; a gone agent is ignored."""
        try:
            self._send({"id": request_id, "error": {"code": code, "message": message}})
        except AgentExited:
            pass

    # ------------------------------------------------------------------ reading

    def request(
        self,
        method: str,
        params: Any,
        handler: Handler,
        timeout: Optional[float] = None,
        poll: Optional[Callable[[], None]] = None,
    ) -> Any:
        """Send a request and wait for its answer, handing every other message to ``handler``.

        Args:
            method, params: the request.
            handler: see :data:`Handler`.
            timeout: seconds to wait at most (``None``: no bound).
            poll: called every few tens of milliseconds while waiting; may raise to stop
                waiting (the driver's cancel and grace logic).

        Returns:
            The answer's ``result``.

        Raises:
            RpcError: the agent answered with an error.
            AgentExited: the agent's stdout ended first.
            TimeoutError: no answer within ``timeout``.
        """
        if self.gone:
            raise AgentExited(f"the agent is gone (it exited before {method})")
        self._next_id += 1
        request_id = self._next_id
        self._send({"id": request_id, "method": method, "params": params})
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if poll is not None:
                poll()
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"the agent did not answer {method} within {timeout:g} s")
            event = self.proc.next_event(_TICK)
            if event is None:
                continue
            if event is JsonLinesProcess.EOF:
                self.gone = True
                raise AgentExited(f"the agent exited before it answered {method}")
            assert isinstance(event, Event)
            message = event.obj
            if message is None:
                continue  # not JSON: agents may log to stdout; nothing to do with it
            if "method" not in message and "id" in message:
                if message.get("id") != request_id:
                    continue  # the answer to a request given up earlier
                error = message.get("error")
                if error is not None:
                    if not isinstance(error, dict):
                        raise RpcError(INTERNAL_ERROR, f"malformed error answer: {error!r}")
                    code = error.get("code")
                    raise RpcError(
                        code if isinstance(code, int) else INTERNAL_ERROR,
                        str(error.get("message") or "error"),
                        error.get("data"),
                    )
                return message.get("result")
            if isinstance(message.get("method"), str):
                handler(message)

    def drain(self, handler: Handler) -> bool:
        """Hand every message already queued to ``handler`` without waiting.

        Returns:
            False when the agent's stdout has ended (it is gone), else True.
        """
        while not self.gone:
            event = self.proc.next_event(0)
            if event is None:
                return True
            if event is JsonLinesProcess.EOF:
                self.gone = True
                break
            assert isinstance(event, Event)
            if event.obj is not None and isinstance(event.obj.get("method"), str):
                handler(event.obj)
        return False

    def settle(
        self,
        handler: Handler,
        quiet: float,
        limit: float,
        poll: Optional[Callable[[], None]] = None,
    ) -> bool:
        """Hand every message to ``handler`` until the agent has been silent for ``quiet``
        seconds, or ``limit`` seconds have passed: what an agent sends on its own after an
        answer (the history a ``session/load`` replays after its answer) is read here, not
        by the next request.

        Args:
            handler: see :data:`Handler`.
            quiet, limit: seconds (``quiet`` <= ``limit``).
            poll: as for :meth:`request`.

        Returns:
            False when the agent's stdout has ended (it is gone), else True.
        """
        start = last = time.monotonic()
        while not self.gone:
            now = time.monotonic()
            if now - last >= quiet or now - start >= limit:
                return True
            if poll is not None:
                poll()
            event = self.proc.next_event(min(_TICK, max(0.0, quiet - (now - last))))
            if event is None:
                continue
            if event is JsonLinesProcess.EOF:
                self.gone = True
                break
            assert isinstance(event, Event)
            last = time.monotonic()
            if event.obj is not None and isinstance(event.obj.get("method"), str):
                handler(event.obj)
        return False

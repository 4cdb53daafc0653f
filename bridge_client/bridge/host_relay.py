"""The bridge's end of the MCP server named ``host``: a local socket that the server process
(:mod:`bridge_client.drivers.mcp_host`, started by the agent's CLI) relays tool listings and
tool calls to, for one run of a turn.

:func:`start_relay` opens a Unix socket in a new private folder (mode 0700) and makes a random
token; only a request that carries the token is served (compared in constant time). One JSON
line per connection, one JSON line back:

- ``{"token", "op": "list"}`` → ``{"tools": [{"name", "description", "inputSchema"}]}``
- ``{"token", "op": "call", "name", "arguments"}`` → ``{"output", "isError"}`` once the
  call's result is recorded (:func:`~bridge_client.bridge.host_calls.call_host_tool`)
- anything else → ``{"error": text}``

:func:`mcp_server_config` is the ``host`` entry a driver writes into its CLI's MCP
configuration (command, arguments, environment).
"""
from __future__ import annotations

import hmac
import json
import logging
import os
import secrets
import shutil
import socket
import sys
import tempfile
import threading
from typing import Any, Dict, List, Optional

from .host_calls import call_host_tool, host_tools

__all__ = ["HostRelay", "start_relay", "mcp_server_config", "MAX_REQUEST_BYTES"]

log = logging.getLogger("bridge_client.bridge.turns")

MAX_REQUEST_BYTES = 16 * 1024 * 1024
"""A relayed request is at most 16 MiB of JSON."""


class HostRelay:
    """A running relay (see the module docstring); :meth:`close` ends it and removes its folder.

    Attributes:
        path: the Unix socket's path. token: the secret a request must carry (``str``).
    """

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx
        self._folder = tempfile.mkdtemp(prefix="bc-host-")  # mode 0700
        self.path = os.path.join(self._folder, "relay.sock")
        self.token = secrets.token_hex(32)
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.path)
        os.chmod(self.path, 0o600)
        self._server.listen(16)
        self._closed = threading.Event()
        self._count = 0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, name="host-relay", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), name="host-relay-call", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                request = _read_line(conn)
                answer = self._answer(request)
            except Exception as exc:  # a bad request, or the run ended under it
                log.debug("host relay: %s", exc)
                answer = {"error": f"{type(exc).__name__}: {exc}"}
            try:
                conn.sendall(json.dumps(answer, ensure_ascii=False).encode("utf-8") + b"\n")
            except OSError:
                pass

    def _answer(self, request: Any) -> Dict[str, Any]:
        token = str(request.get("token", "")) if isinstance(request, dict) else ""
        if not isinstance(request, dict) or not hmac.compare_digest(token.encode(), self.token.encode()):
            return {"error": "not this session's relay"}
        op = request.get("op")
        if op == "list":
            tools = [
                {"name": t["name"], "description": t["description"], "inputSchema": t["inputSchema"]}
                for t in host_tools(self._ctx)
            ]
            return {"tools": tools}
        if op == "call":
            name, arguments = request.get("name"), request.get("arguments")
            if not any(t["name"] == name for t in host_tools(self._ctx)):
                return {"output": f"no host tool named {name!r}", "isError": True}
            with self._lock:
                self._count += 1
                call_id = f"mcp-{self._count}"
            output, is_error = call_host_tool(self._ctx, call_id, str(name), arguments or {})
            return {"output": output, "isError": is_error}
        return {"error": f"unknown op {op!r}"}

    def close(self) -> None:
        """Stop serving and remove the socket's folder. Idempotent."""
        if self._closed.is_set():
            return
        self._closed.set()
        try:
            self._server.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._server.close()
        shutil.rmtree(self._folder, ignore_errors=True)


def _read_line(conn: socket.socket) -> Any:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_REQUEST_BYTES:
            raise ValueError("request too long")
    return json.loads(data.decode("utf-8"))


def start_relay(ctx: Any) -> Optional[HostRelay]:
    """A relay for this run when the session has host tools, else ``None``."""
    return HostRelay(ctx) if host_tools(ctx) else None


def mcp_server_config(relay: HostRelay, python: Optional[str] = None) -> Dict[str, Any]:
    """The ``host`` MCP server's entry: ``{"command", "args", "env"}`` (stdio)."""
    env: Dict[str, str] = {"BRIDGE_CLIENT_HOST_RELAY": relay.path, "BRIDGE_CLIENT_HOST_TOKEN": relay.token}
    path: List[str] = [p for p in sys.path if p and os.path.isdir(p)]
    env["PYTHONPATH"] = os.pathsep.join(path)
    return {"command": python or sys.executable, "args": ["-m", "bridge_client.drivers.mcp_host"], "env": env}

"""The MCP server named ``host``: a stdio process an agent's CLI starts from the MCP
configuration its driver writes, serving the session's host tools.

It speaks MCP's JSON-RPC 2.0 over stdio (one message per line): ``initialize``, ``ping``,
``tools/list`` and ``tools/call``; notifications are read and ignored. Each request is relayed
to the bridge over the local socket named by ``BRIDGE_CLIENT_HOST_RELAY``, carrying the token
in ``BRIDGE_CLIENT_HOST_TOKEN`` (see :mod:`bridge_client.bridge.host_relay`). A ``tools/call``
answers once the bridge has recorded the host's result: ``{"content": [{"type": "text",
"text": ...}], "isError": bool}`` (a JSON result as its JSON text). Calls run in threads of
their own, so a ``ping`` is answered while a tool runs.

Run as ``python -m bridge_client.drivers.mcp_host``; it ends when stdin closes.
"""
from __future__ import annotations

import json
import os
import socket
import sys
import threading
from typing import Any, Dict, Optional, TextIO

__all__ = ["McpHostServer", "main", "PROTOCOL_VERSIONS"]

PROTOCOL_VERSIONS = ("2025-06-18", "2025-03-26", "2024-11-05")
"""The MCP protocol versions this server speaks (the first is the one it offers)."""


def relay(request: Dict[str, Any], path: str, token: str) -> Dict[str, Any]:
    """Send one request to the bridge's relay and return its answer (a JSON object).

    Raises:
        OSError: the relay cannot be reached. ValueError: its answer is not JSON.
    """
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        conn.sendall(json.dumps({**request, "token": token}, ensure_ascii=False).encode("utf-8") + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
    value = json.loads(data.decode("utf-8"))
    if not isinstance(value, dict):
        raise ValueError("the relay's answer is not an object")
    return value


class McpHostServer:
    """The server's loop (see the module docstring).

    Args:
        path, token: the relay's socket and token. out: where messages are written.
    """

    def __init__(self, path: str, token: str, out: TextIO) -> None:
        self.path, self.token, self.out = path, token, out
        self._write_lock = threading.Lock()

    def send(self, message: Dict[str, Any]) -> None:
        """Write one JSON-RPC message as a line."""
        text = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
        with self._write_lock:
            self.out.write(text + "\n")
            self.out.flush()

    def handle(self, message: Any) -> None:
        """Answer one message (a request gets a result or an error; a notification nothing)."""
        if not isinstance(message, dict) or "method" not in message:
            return  # a response or junk: nothing to answer
        method, mid = message.get("method"), message.get("id")
        if mid is None:
            return  # a notification
        params = message.get("params") or {}
        if method == "tools/call":
            threading.Thread(target=self._call, args=(mid, params), daemon=True, name="mcp-call").start()
            return
        try:
            result = self._quick(method, params)
        except LookupError:
            error = {"code": -32601, "message": f"no method {method}"}
            self.send({"jsonrpc": "2.0", "id": mid, "error": error})
            return
        except Exception as exc:
            self._fail(mid, exc)
            return
        self.send({"jsonrpc": "2.0", "id": mid, "result": result})

    def _quick(self, method: Any, params: Any) -> Dict[str, Any]:
        if method == "initialize":
            asked = params.get("protocolVersion") if isinstance(params, dict) else None
            version = asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0]
            return {
                "protocolVersion": version,
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": "host", "version": "1.0"},
            }
        if method == "ping":
            return {}
        if method == "tools/list":
            answer = relay({"op": "list"}, self.path, self.token)
            if "error" in answer:
                raise RuntimeError(str(answer["error"]))
            return {"tools": answer.get("tools", [])}
        raise LookupError(method)

    def _call(self, mid: Any, params: Any) -> None:
        try:
            if not isinstance(params, dict) or not isinstance(params.get("name"), str):
                raise ValueError("tools/call needs params.name")
            request = {"op": "call", "name": params["name"], "arguments": params.get("arguments") or {}}
            answer = relay(request, self.path, self.token)
            if "error" in answer:
                raise RuntimeError(str(answer["error"]))
        except Exception as exc:
            self._fail(mid, exc)
            return
        output = answer.get("output")
        text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
        result = {"content": [{"type": "text", "text": text}], "isError": bool(answer.get("isError"))}
        self.send({"jsonrpc": "2.0", "id": mid, "result": result})

    def _fail(self, mid: Any, exc: BaseException) -> None:
        error = {"code": -32603, "message": f"{type(exc).__name__}: {exc}"}
        self.send({"jsonrpc": "2.0", "id": mid, "error": error})

    def serve(self, stdin: TextIO) -> None:
        """Read messages until stdin closes; a line that is not JSON gets a parse error."""
        for line in stdin:
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except ValueError:
                self.send({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "parse error"}})
                continue
            self.handle(message)


def main(argv: Optional[list] = None) -> int:  # type: ignore[type-arg]
    """Serve on stdin/stdout; exit status 2 without the relay's environment variables."""
    path, token = os.environ.get("BRIDGE_CLIENT_HOST_RELAY"), os.environ.get("BRIDGE_CLIENT_HOST_TOKEN")
    if not path or not token:
        sys.stderr.write("mcp_host: BRIDGE_CLIENT_HOST_RELAY and BRIDGE_CLIENT_HOST_TOKEN must be set\n")
        return 2
    McpHostServer(path, token, sys.stdout).serve(sys.stdin)
    return 0


if __name__ == "__main__":
    sys.exit(main())

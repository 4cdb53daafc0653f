"""Helpers for the bridge's tests: a real bridge process in a temporary state directory, and
a small wire client over websocket-client that speaks frames built with
``bridge_client.wire.frames``.

Processes are only ever stopped by their own pid.
"""
from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import websocket

from bridge_client.state_dir import identity
from bridge_client.wire import frames

TOKEN = "test-token-5f1c2a9e"
BRIDGE_ID = "0123456789abcdef0123456789abcdef"
CANARY_ENV = "BRIDGE_CLIENT_TEST_CANARY"
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def wait_until(predicate: Any, timeout: float = 5.0, interval: float = 0.01) -> Any:
    """Poll ``predicate`` until it is truthy or ``timeout`` seconds pass; return its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def prepare_state(
    state: str,
    *,
    agent_id: str = "echo",
    options: Any = None,
    idle_timeout: float = 30.0,
    token: Optional[str] = TOKEN,
    bind: str = "127.0.0.1",
) -> None:
    """Write launch.json and token in ``state`` as a host would."""
    os.makedirs(state, mode=0o700, exist_ok=True)
    launch = identity.LaunchInfo(agent_id, BRIDGE_ID, options, idle_timeout, bind)
    identity.secure_write(os.path.join(state, identity.LAUNCH_FILE), launch.to_json().encode())
    if token is not None:
        identity.secure_write(os.path.join(state, identity.TOKEN_FILE), (token + "\n").encode())


class BridgeProcess:
    """One ``python -m bridge_client.bridge`` process with its state directory and workspace."""

    def __init__(
        self,
        state: str,
        workspace: str,
        driver: str = "echo",
        env: Optional[Dict[str, str]] = None,
        args: Sequence[str] = (),
        preexec: Optional[Callable[[], None]] = None,
    ) -> None:
        self.state = state
        self.workspace = workspace
        self.driver = driver
        self.args = list(args)
        self.preexec = preexec
        self.log_path = os.path.join(state, identity.LOG_FILE)
        self.extra_env = env or {}
        self.proc: Optional[subprocess.Popen] = None
        self.info: Optional[identity.ListeningInfo] = None

    @property
    def listening_path(self) -> str:
        return os.path.join(self.state, identity.LISTENING_FILE)

    def spawn(self) -> "BridgeProcess":
        """Start the process (stdout/stderr appended to bridge.log) without waiting."""
        os.makedirs(self.workspace, exist_ok=True)
        env = dict(os.environ)
        env[identity.STATE_DIR_ENV] = self.state
        env[CANARY_ENV] = "canary-must-not-leak"
        env["PYTHONPATH"] = os.pathsep.join([REPO, HERE, env.get("PYTHONPATH", "")])
        env.update(self.extra_env)
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bridge_client.bridge", "--driver", self.driver, *self.args],
                cwd=self.workspace,
                preexec_fn=self.preexec,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        finally:
            log.close()
        return self

    def start(self, timeout: float = 10.0) -> "BridgeProcess":
        """Spawn and wait for a listening.json that names this process."""
        self.spawn()
        self.wait_listening(timeout)
        return self

    def wait_listening(self, timeout: float = 10.0) -> identity.ListeningInfo:
        assert self.proc is not None

        def ready() -> Optional[identity.ListeningInfo]:
            if self.proc.poll() is not None:
                raise AssertionError(f"bridge exited with {self.proc.returncode}:\n{self.log()}")
            data = identity.optional_read(self.listening_path)
            if data is None:
                return None
            info = identity.parse_listening(data)
            return info if info.pid == self.proc.pid else None

        info = wait_until(ready, timeout)
        assert info, f"no listening.json within {timeout} s:\n{self.log()}"
        self.info = info
        return info

    @property
    def url(self) -> str:
        assert self.info is not None
        return f"ws://127.0.0.1:{self.info.port}/"

    def connect(self, token: str = TOKEN, path: str = "/") -> "WireClient":
        assert self.info is not None
        ws = websocket.create_connection(
            f"ws://127.0.0.1:{self.info.port}{path}", header=[f"Authorization: Bearer {token}"], timeout=5
        )
        return WireClient(ws)

    def log(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 5.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def stop(self, timeout: float = 5.0) -> Optional[int]:
        """SIGTERM by pid; SIGKILL if it has not exited within ``timeout`` seconds."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            return None

    def kill(self) -> None:
        """SIGKILL by pid, as a crash would."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


class WireClient:
    """A blocking test client of the bridge protocol over one WebSocket."""

    def __init__(self, ws: websocket.WebSocket) -> None:
        self.ws = ws
        self._ids = itertools.count(1)

    def close(self) -> None:
        try:
            self.ws.close(timeout=1)
        except Exception:
            pass

    def __enter__(self) -> "WireClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # raw frames
    def send(self, message: Any) -> None:
        if isinstance(message, (str, bytes)):
            if isinstance(message, bytes):
                self.ws.send_binary(message)
            else:
                self.ws.send(message)
        elif isinstance(message, dict) or isinstance(message, list):
            self.ws.send(json.dumps(message))
        else:
            # ensure_ascii: a lone surrogate goes out as a JSON escape, as any host might send it
            self.ws.send(json.dumps(frames.to_json(message)))

    def recv(self) -> Dict[str, Any]:
        return json.loads(self.ws.recv())

    def request(self, tag: str, payload: Any = None, request_id: Any = None) -> Any:
        rid = next(self._ids) if request_id is None else request_id
        self.send(frames.Request(rid, tag, payload, ()))
        return rid

    def wait_exit(self, request_id: Any) -> Dict[str, Any]:
        """Receive until the Exit of ``request_id``; return its ``exit`` object."""
        while True:
            message = self.recv()
            if message["_tag"] == "Exit" and message["requestId"] == request_id:
                assert type(message["requestId"]) is type(request_id)
                return message["exit"]

    def call(self, tag: str, payload: Any = None) -> Dict[str, Any]:
        return self.wait_exit(self.request(tag, payload))

    def value(self, tag: str, payload: Any = None) -> Any:
        exit_ = self.call(tag, payload)
        assert exit_["_tag"] == "Success", exit_
        return exit_["value"]

    def causes(self, tag: str, payload: Any = None) -> List[Dict[str, Any]]:
        exit_ = self.call(tag, payload)
        assert exit_["_tag"] == "Failure", exit_
        return exit_["cause"]

    # RPC helpers
    def open(self, session_id: str, state: Any = None) -> Dict[str, Any]:
        return self.value("OpenSession", {"sessionId": session_id, "state": state})

    def start(self, session_id: str, turn_id: str, prompt: str) -> str:
        return self.value("StartTurn", {"sessionId": session_id, "turnId": turn_id, "prompt": prompt})[
            "status"
        ]

    def read(
        self, session_id: str, turn_id: str, offset: int = 0, after_step: int = 0
    ) -> Tuple[List[Dict[str, Any]], int, Dict[str, Any]]:
        """ReadTurn to its end, acking every Chunk. Returns (parts, chunk count, exit)."""
        rid = self.request(
            "ReadTurn",
            {"sessionId": session_id, "turnId": turn_id, "offset": offset, "afterStep": after_step},
        )
        parts: List[Dict[str, Any]] = []
        chunks = 0
        while True:
            message = self.recv()
            if message.get("requestId") != rid:
                continue
            if message["_tag"] == "Chunk":
                assert message["values"], "a Chunk is never empty"
                parts.extend(message["values"])
                chunks += 1
                self.send(frames.Ack(rid))
            else:
                assert message["_tag"] == "Exit", message
                return parts, chunks, message["exit"]


def text_of(parts: List[Dict[str, Any]]) -> str:
    return "".join(p["text"] for p in parts if p["type"] == "text-delta")

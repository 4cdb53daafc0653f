"""The MCP server named ``host`` in the agent CLIs' configurations: one relay per run of a
turn (:mod:`bridge_client.bridge.host_relay`), and what each CLI is told about it.

:func:`host_mcp` opens the run's relay when the session has host tools (and closes it when the
run ends); the driver asks :func:`current` for it from the thread that runs the turn while it
builds the CLI's command line or configuration:

- Claude Code: :func:`claude_args`: ``--mcp-config FILE`` (``{"mcpServers": {"host": ...}}``,
  mode 0600, in the relay's private folder), and the tools as ``mcp__host__NAME`` for
  ``--allowedTools`` (:func:`claude_allowed`), except the tools marked ``approve=True``, which
  Claude Code then asks about (through the approval flow when the session has approvals on).
- Codex: :func:`codex_args`: ``-c mcp_servers.host.command=...`` overrides of its
  ``config.toml`` (``args``, ``env``, ``required``), its tools approved without a prompt
  (``default_tools_approval_mode = "approve"``) except those marked ``approve=True``
  (``prompt``: ``codex exec`` cannot ask, so it refuses their calls).
- Qwen Code: :func:`settings_env`: its system settings file (the variable
  ``QWEN_CODE_SYSTEM_SETTINGS_PATH``) names a file with ``{"mcpServers": {"host": {...,
  "trust": true}}}``, merged over the user's settings.
- The Gemini CLI: its system settings file too, but it reads one only in a folder of root's
  that others cannot write (never below ``/tmp``): :mod:`bridge_client.drivers.gemini_host`.
"""
from __future__ import annotations

import contextlib
import json
import os
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional

from ..bridge.host_calls import host_tools
from ..bridge.host_relay import HostRelay, mcp_server_config, start_relay

__all__ = [
    "host_mcp", "kept_relay", "current", "claude_args", "claude_allowed", "codex_args", "settings_env",
    "SERVER_NAME", "write_private_json", "AgentRelay",
]

SERVER_NAME = "host"
"""The MCP server's name: Claude Code calls its tools ``mcp__host__NAME``."""

_LOCAL = threading.local()


@contextlib.contextmanager
def host_mcp(ctx: Any) -> Iterator[Optional[HostRelay]]:
    """The run's relay (``None`` without host tools), current in this thread while it runs."""
    relay = start_relay(ctx)
    previous = getattr(_LOCAL, "relay", None), getattr(_LOCAL, "ctx", None)
    _LOCAL.relay, _LOCAL.ctx = relay, ctx
    try:
        yield relay
    finally:
        _LOCAL.relay, _LOCAL.ctx = previous
        if relay is not None:
            relay.close()


class AgentRelay(HostRelay):
    """A relay (:class:`~bridge_client.bridge.host_relay.HostRelay`) that serves the turn of
    its session running now: :meth:`bind` gives it each turn's context (a session runs one
    turn at a time). A call that comes between turns gets an error result (the last turn is
    over)."""

    _before: Optional[Callable[[], None]] = None

    def bind(self, ctx: Any, before: Optional[Callable[[], None]] = None) -> None:
        """Serve the turn ``ctx`` (a :class:`~bridge_client.bridge.context.TurnContext`);
        ``before()`` runs before each call is made (it opens the turn's step: an agent may
        call an MCP tool before it announces the call, as OpenCode does)."""
        self._ctx = ctx
        self._before = before

    def _answer(self, request: Any) -> Dict[str, Any]:
        before = self._before
        if before is not None and isinstance(request, dict) and request.get("op") == "call":
            before()
        return super()._answer(request)


@contextlib.contextmanager
def kept_relay(relay: Optional[HostRelay], ctx: Any) -> Iterator[None]:
    """Make ``relay`` (one that outlives the run: a warm process's, an ACP agent's) current in
    this thread for ``ctx`` while the block builds the CLI's command line; it stays open."""
    previous = getattr(_LOCAL, "relay", None), getattr(_LOCAL, "ctx", None)
    _LOCAL.relay, _LOCAL.ctx = relay, ctx
    try:
        yield
    finally:
        _LOCAL.relay, _LOCAL.ctx = previous


def current() -> Optional[HostRelay]:
    """The relay of the run this thread runs, or ``None``."""
    relay: Optional[HostRelay] = getattr(_LOCAL, "relay", None)
    return relay


def _tools() -> List[Dict[str, Any]]:
    ctx = getattr(_LOCAL, "ctx", None)
    return host_tools(ctx) if ctx is not None else []


def claude_allowed() -> List[str]:
    """The host tools Claude Code may run without asking: ``mcp__host__NAME`` of each tool
    not marked ``approve=True``."""
    if current() is None:
        return []
    return [f"mcp__{SERVER_NAME}__{t['name']}" for t in _tools() if not t.get("approve")]


def claude_args() -> List[str]:
    """``["--mcp-config", FILE]`` for the current run's relay (``[]`` without one)."""
    relay = current()
    if relay is None:
        return []
    config = {"mcpServers": {SERVER_NAME: {"type": "stdio", **mcp_server_config(relay)}}}
    return ["--mcp-config", write_private_json(relay, "mcp.json", config)]


def _toml(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)  # a JSON string or array is a TOML one too


def codex_args() -> List[str]:
    """``-c`` overrides that give Codex the ``host`` server (``[]`` without a relay)."""
    relay = current()
    if relay is None:
        return []
    config = mcp_server_config(relay)
    env = "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in config["env"].items()) + "}"
    prefix = f"mcp_servers.{SERVER_NAME}"
    args = [
        "-c", f"{prefix}.command={_toml(config['command'])}",
        "-c", f"{prefix}.args={_toml(config['args'])}",
        "-c", f"{prefix}.env={env}",
        "-c", f"{prefix}.required=true",
        "-c", f'{prefix}.default_tools_approval_mode="approve"',  # runs them without a prompt
    ]
    for tool in _tools():
        if tool.get("approve"):  # codex exec cannot ask: such a call is refused
            args += ["-c", f'{prefix}.tools.{tool["name"]}.approval_mode="prompt"']
    return args


def settings_env(variable: str) -> Dict[str, str]:
    """``{variable: FILE}``: a settings file (mode 0600, in the relay's private folder) that
    gives the CLI the ``host`` server, trusted (its calls are not confirmed); ``{}`` without a
    relay."""
    relay = current()
    if relay is None:
        return {}
    config = {"mcpServers": {SERVER_NAME: {**mcp_server_config(relay), "trust": True}}}
    return {variable: write_private_json(relay, "settings.json", config)}


def write_private_json(relay: HostRelay, name: str, value: Any) -> str:
    """Write ``value`` as the JSON file ``name`` (mode 0600) in the relay's private folder,
    for a CLI that reads its MCP servers from a file; returns the file's path."""
    path = os.path.join(os.path.dirname(relay.path), name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(value, f)
    return path

"""What the conformance suite (``test_conformance.py``) needs beside its scenarios: each of the
eleven named agent drivers set up with its real CLI against the scripted model server
(:func:`make_agent`), the replies that suit it (its shell tool, its host tool's name, Aider's
edit blocks), the CLI versions, and the record of outcomes the matrix of ``docs/agents.md``
is written from (:class:`Cells`; see ``conformance_matrix.py``).

Recording: with ``BRIDGE_CLIENT_CONFORMANCE_JSON`` set to a file, each cell a test decides is
merged into that file (read, updated, written by rename), so runs of one driver at a time add
up to one record. A test that fails marks the cells it had not decided yet ``failed``.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

import bridge_client as bc
from host_support import options, session_options
from model_server import Call, ModelServer, Reply, Request, Text, shell_call, tool_call

from conformance_matrix import AGENTS, SCENARIOS  # noqa: F401  (the matrix's rows and columns)

CLI_PROCESS = ("claude-code", "codex", "gemini", "qwen", "pi")
ACP_PRESETS = ("opencode", "copilot", "codex-acp", "cline", "vibe")
KEY = "sk-bridge-client-conformance-0123456789abcdef"  # long: Copilot masks the key's value
RECORD_ENV = "BRIDGE_CLIENT_CONFORMANCE_JSON"


# ----------------------------------------------------------------------------- the agents


@dataclass
class Agent:
    """One driver's real CLI, set up for one test.

    Attributes:
        driver: the driver name.
        agent_options: the driver's options (``executable`` and the model server's).
        env: the session's environment (a private HOME for the ACP presets and Aider,
            ``PROOF_VALUE`` = ``42`` for every driver).
        home: the CLI's private HOME.
        version: the CLI's version, as installed.
    """

    driver: str
    agent_options: Dict[str, Any]
    env: Dict[str, Any]
    home: str
    version: str
    side: List[Reply] = field(default_factory=list)

    def bridge_options(self) -> bc.BridgeOptions:
        """The bridge's options for this driver."""
        return options(self.driver, agent_options=self.agent_options)

    def session(self, sandbox: Any, **kw: Any) -> Any:
        """A new session on ``sandbox`` (``kw``: more session options)."""
        return bc.create_session(self.bridge_options(), self.session_options(sandbox, **kw))

    def session_options(self, sandbox: Any, **kw: Any) -> bc.CreateSessionOptions:
        """The session's options on ``sandbox``, with this agent's environment."""
        kw.setdefault("launch_timeout", 60.0)
        kw.setdefault("resend_window", 30.0)
        return session_options(sandbox, env=dict(self.env), **kw)

    def script(self, model: ModelServer, *replies: Reply) -> None:
        """Queue ``replies`` for the agent's model requests. Aider offers no tools, so its
        requests are the server's side requests: they take ``replies`` in order (the last
        one again after them)."""
        if self.driver != "aider":
            model.script(*replies)
            return
        self.side.extend(replies)
        lock = threading.Lock()

        def reply(request: Request) -> List[Any]:
            with lock:
                chosen = self.side.pop(0) if len(self.side) > 1 else self.side[0]
            return chosen.blocks(request)

        model.side_reply = reply


def shell(command: str) -> Reply:
    """The model's call of the request's shell tool (Cline's is ``run_commands``)."""
    plain = shell_call(command)

    def build(request: Request) -> List[Any]:
        if "run_commands" in dict(request.tools()):
            return tool_call("run_commands", {"commands": [command]}).blocks(request)
        return plain.blocks(request)

    return Reply(build)


HOST_TOOL_NAMES = {"claude-code": "mcp__host__{}", "codex": "mcp__host/{}", "qwen": "mcp__host__{}",
                   "gemini": "mcp_host_{}"}
"""The name a CLI calls a host tool by, where it may not be in the request's tool list
(Claude Code and Qwen Code may defer MCP tools behind a tool search)."""


def host_call(name: str, args: Dict[str, Any], driver: str = "") -> Reply:
    """The model's call of the host tool ``name``, by whatever name the CLI offers it under:
    a tool whose name ends with ``name`` (``mcp__host__lookup``, ``mcp_host_lookup``,
    ``host_lookup``, ...), else Codex's namespace tool ``mcp__host`` (``mcp__host/NAME``).

    Raises (in the server thread, recorded in ``server.errors``):
        LookupError: the request offers no such tool.
    """

    def build(request: Request) -> List[Any]:
        if driver in HOST_TOOL_NAMES:
            return [Call(HOST_TOOL_NAMES[driver].format(name), dict(args))]
        tools = [t for t, _ in request.tools()]
        for tool in tools:
            if tool.endswith(name) and "host" in tool:
                return [Call(tool, dict(args))]
        for tool in tools:
            if tool.startswith("mcp__host"):
                return [Call(f"{tool}/{name}", dict(args))]
        raise LookupError(f"no host tool {name!r} among {sorted(tools)}")

    return Reply(build)


def aider_edit(path: str, line: str, say: str = "I will write the file.") -> Reply:
    """An answer in Aider's diff edit format that makes ``path`` hold ``line`` (an empty
    SEARCH part creates the file)."""
    block = f"{say}\n\n{path}\n```\n<<<<<<< SEARCH\n=======\n{line}\n>>>>>>> REPLACE\n```\n"
    return Reply(lambda _r: [Text(block, 4)])


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def _npm_version(prefix: str, package: str) -> str:
    try:
        with open(os.path.join(prefix, "node_modules", package, "package.json")) as f:
            return str(json.load(f)["version"])
    except (OSError, ValueError, KeyError):
        return "unknown"


def _py_version(program: str, package: str) -> str:
    python = os.path.join(os.path.dirname(program), "python")
    code = f"import importlib.metadata as m; print(m.version({package!r}))"
    try:
        done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return done.stdout.strip() or "unknown"


NPM_PACKAGES = {"claude-code": "@anthropic-ai/claude-code", "codex": "@openai/codex",
                "gemini": "@google/gemini-cli", "qwen": "@qwen-code/qwen-code",
                "pi": "@mariozechner/pi-coding-agent", "opencode": "opencode-ai",
                "copilot": "@github/copilot", "codex-acp": "@zed-industries/codex-acp", "cline": "cline"}
PY_PACKAGES = {"vibe": "mistral-vibe", "aider": "aider-chat"}


def make_agent(driver: str, model: ModelServer, home: str, programs: Callable[[str], str],
               setenv: Callable[[str, str], None], cli_prefix: Callable[[], str]) -> Agent:
    """Set ``driver``'s real CLI up against ``model`` with the private ``home``.

    Args:
        programs: ``programs(driver)``, the installed program (skips the test when it
            cannot be installed).
        setenv: sets a variable of this process (the bridge the test launches inherits
            it); the CLI drivers of ``cli_process`` read their HOME from there, as the
            bridge finds their transcripts under it.
        cli_prefix: the prefix of the main npm lock (``agent_clis``).
    """
    from cli_setups import SETUPS  # the five CLIs' offline set-ups

    os.makedirs(home, exist_ok=True)
    executable = programs(driver)
    env: Dict[str, Any] = {"PROOF_VALUE": "42"}
    if driver in CLI_PROCESS:
        setenv("HOME", home)
        os.environ.pop("XDG_CONFIG_HOME", None)
        opts = SETUPS[driver](model, home, setenv)
        opts.update(executable=executable, interrupt_grace=2.0)
        version = _npm_version(cli_prefix(), NPM_PACKAGES[driver])
        return Agent(driver, opts, env, home, version)
    env.update({
        "HOME": home,
        "XDG_CONFIG_HOME": os.path.join(home, ".config"),
        "XDG_DATA_HOME": os.path.join(home, ".local", "share"),
        "XDG_STATE_HOME": os.path.join(home, ".local", "state"),
        "XDG_CACHE_HOME": os.path.join(home, ".cache"),
    })
    opts = {"executable": executable, "base_url": f"{model.url}/v1", "model": "fake-model",
            "interrupt_grace": 2.0}
    if driver == "copilot":
        env["COPILOT_PROVIDER_API_KEY"] = bc.Redacted(KEY)
    elif driver in ("opencode", "codex-acp"):
        opts["api_key_env"] = "FAKE_KEY"
        env["FAKE_KEY"] = bc.Redacted(KEY)
    else:
        env["OPENAI_API_KEY"] = bc.Redacted(KEY)
    if driver == "codex-acp":
        opts["sandbox"] = "danger-full-access"  # workspace-write needs bubblewrap, absent here
        env["CODEX_HOME"] = os.path.join(home, ".codex")
        os.makedirs(env["CODEX_HOME"], exist_ok=True)
    if driver == "aider":
        opts["model"] = "openai/fake-model"
        version = _py_version(executable, PY_PACKAGES[driver])
    elif driver == "vibe":
        version = _py_version(executable, PY_PACKAGES[driver])
    else:
        prefix = os.path.dirname(os.path.dirname(os.path.dirname(executable)))
        version = _npm_version(prefix, NPM_PACKAGES[driver])
    return Agent(driver, opts, env, home, version)


# ----------------------------------------------------------------------------- the record


def record_path() -> Optional[str]:
    """The record file (``BRIDGE_CLIENT_CONFORMANCE_JSON``), or ``None``: no record."""
    return os.environ.get(RECORD_ENV) or None


_LOCK = threading.Lock()


def _merge(driver: str, version: Optional[str], cells: Dict[str, Dict[str, str]]) -> None:
    path = record_path()
    if path is None:
        return
    with _LOCK:
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError):
            data = {}
        data.setdefault("agents", {})
        entry = data["agents"].setdefault(driver, {"version": "unknown", "cells": {}})
        if version:
            entry["version"] = version
        entry["cells"].update(cells)
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(data, f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)


class Cells:
    """The matrix cells one test decides for one driver (its ``keys``): each is set once,
    ``passed``, ``unsupported`` (with the typed error's name) or ``n/a`` (with why)."""

    def __init__(self, driver: str, keys: List[str]) -> None:
        self.driver = driver
        self.keys = list(keys)
        self.version: Optional[str] = None
        self.done: Dict[str, Dict[str, str]] = {}

    def passed(self, key: str, note: str = "") -> None:
        """The scenario ``key`` passed (``note``: how, where it differs)."""
        self._set(key, {"outcome": "passed", "note": note})

    def unsupported(self, key: str, error: type, note: str = "") -> None:
        """The driver refused ``key`` with the typed ``error``, as asserted."""
        self._set(key, {"outcome": "unsupported", "error": error.__name__, "note": note})

    def not_carried(self, key: str, why: str) -> None:
        """The scenario runs, but what it proves does not hold yet (``why``), as asserted."""
        self._set(key, {"outcome": "not carried", "note": why})

    def not_applicable(self, key: str, why: str) -> None:
        """The scenario makes no sense for this driver (``why``)."""
        self._set(key, {"outcome": "n/a", "note": why})

    def _set(self, key: str, cell: Dict[str, str]) -> None:
        assert key in self.keys, (key, self.keys)
        self.done[key] = cell
        _merge(self.driver, self.version, {key: cell})

    def finish(self, failed: bool) -> None:
        """After the test: its undecided cells are ``failed`` when it failed."""
        if failed:
            rest = {k: {"outcome": "failed", "note": ""} for k in self.keys if k not in self.done}
            if rest:
                _merge(self.driver, self.version, rest)

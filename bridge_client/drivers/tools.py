"""Workspace tools for the ``openai`` driver: run a command, read a file, write a file, list
a folder. Each is described to the model as a Chat Completions function tool
(:data:`TOOL_SPECS`) and run by :func:`run_tool`, which never raises for a bad call: it
returns ``(output, is_error)`` so the model sees what went wrong and can try again.

Paths are relative to the workspace (the bridge's working directory); a path that leaves
it (``..``, an absolute path elsewhere, a symlink out) is refused. Outputs are cut at
``max_output`` characters (the model's context is finite); the cut is said in the output.
"""

from __future__ import annotations

import codecs
import os
import select
import signal
import subprocess
import threading
import time
from typing import Any, Dict, List, Tuple

from .cli_process import cli_env

__all__ = ["TOOL_SPECS", "TOOL_NAMES", "run_tool", "run_command"]

TOOL_SPECS: List[Dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "run_command",
            "description": "Run a shell command (/bin/sh -c) in the workspace and return its exit code and "
            "output (stdout and stderr together). No stdin. Killed after `timeout` seconds.",
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "the command line"},
                    "timeout": {"type": "number", "description": "seconds before the command is killed"},
                },
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a text file of the workspace.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string", "description": "path relative to the workspace"}},
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Create or replace a text file of the workspace (parent folders are created).",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "path relative to the workspace"},
                    "content": {"type": "string", "description": "the whole new content"},
                },
                "required": ["path", "content"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "list_dir",
            "description": "List a folder of the workspace: names, folders end with '/'.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "path relative to the workspace (default '.')"}
                },
            },
        },
    },
]
"""The tools as the ``tools`` field of a Chat Completions request."""

TOOL_NAMES = tuple(spec["function"]["name"] for spec in TOOL_SPECS)

_TICK = 0.05
_KILL_GRACE = 2.0


class _Refused(Exception):
    """A tool call the workspace refuses (bad path, bad argument): its message goes to the model."""


def _inside(root: str, path: Any) -> str:
    if not isinstance(path, str) or not path:
        raise _Refused("path must be a non-empty string")
    if "\x00" in path:
        raise _Refused("path must not contain NUL")
    root_real = os.path.realpath(root)
    full = os.path.realpath(os.path.join(root_real, path))
    if full != root_real and not full.startswith(root_real + os.sep):
        raise _Refused(f"{path!r} is outside the workspace")
    return full


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters cut]"


def run_command(
    command: str, cwd: str, timeout: float, cancelled: threading.Event, max_output: int
) -> Tuple[Dict[str, Any], bool]:
    """Run ``/bin/sh -c command`` in ``cwd`` in its own process group, without stdin, with the
    bridge's environment minus ``BRIDGE_CLIENT_*``.

    Args:
        timeout: seconds before the group is killed. cancelled: kills the group when set.
        max_output: characters of output kept.

    Returns:
        ``({"exitCode", "output", "timedOut", "cancelled"}, is_error)``; ``is_error`` when the
        code is not 0.
    """
    proc = subprocess.Popen(
        ["/bin/sh", "-c", command],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=cli_env(),
    )
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    chunks: List[str] = []
    size = 0
    timed_out = was_cancelled = False
    deadline = time.monotonic() + timeout
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    exited_at = None
    try:
        while True:
            if cancelled.is_set():
                was_cancelled = True
                break
            now = time.monotonic()
            if now >= deadline:
                timed_out = True
                break
            if poller.poll(min(_TICK, deadline - now) * 1000):
                data = os.read(fd, 65536)
                if not data:
                    break
                if size <= max_output:
                    text = decoder.decode(data)
                    chunks.append(text)
                    size += len(text)
                continue
            if proc.poll() is not None:
                exited_at = exited_at if exited_at is not None else now
                if now - exited_at >= 0.2:  # a background child holds the pipe
                    break
        # Output closed (or drained): the command may still run (it closed its stdout).
        while not (timed_out or was_cancelled) and proc.poll() is None:
            if cancelled.wait(_TICK):
                was_cancelled = True
            elif time.monotonic() >= deadline:
                timed_out = True
    finally:
        if proc.poll() is None or timed_out or was_cancelled:
            _kill_group(proc)
        code = proc.wait()
        proc.stdout.close()
    chunks.append(decoder.decode(b"", final=True))
    output = _cut("".join(chunks), max_output)
    result = {"exitCode": code, "output": output, "timedOut": timed_out, "cancelled": was_cancelled}
    return result, code != 0


def _kill_group(proc: "subprocess.Popen[bytes]") -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    try:
        proc.wait(_KILL_GRACE)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def run_tool(
    name: str,
    args: Any,
    root: str,
    cancelled: threading.Event,
    command_timeout: float,
    max_output: int,
) -> Tuple[Any, bool]:
    """Run one tool call in the workspace ``root``.

    Args:
        name: one of :data:`TOOL_NAMES`. args: the parsed JSON arguments (an object).
        cancelled: the turn's cancel event (stops a running command).
        command_timeout: the longest ``run_command`` timeout, seconds (the model may ask for
            less). max_output: characters of output kept.

    Returns:
        ``(output, is_error)``: the tool's JSON output; on a refused or failed call, the
        error message as a str and True. Never raises for a bad call.
    """
    try:
        if not isinstance(args, dict):
            raise _Refused("arguments must be a JSON object")
        if name == "run_command":
            command = args.get("command")
            if not isinstance(command, str) or not command.strip():
                raise _Refused("command must be a non-empty string")
            timeout = args.get("timeout", command_timeout)
            if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout > 0:
                timeout = command_timeout
            return run_command(command, root, min(float(timeout), command_timeout), cancelled, max_output)
        if name == "read_file":
            path = _inside(root, args.get("path"))
            with open(path, "rb") as f:
                data = f.read(max_output * 4 + 4)
            return _cut(data.decode("utf-8", "replace"), max_output), False
        if name == "write_file":
            path = _inside(root, args.get("path"))
            content = args.get("content")
            if not isinstance(content, str):
                raise _Refused("content must be a string")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
            try:
                with open(tmp, "w", encoding="utf-8") as f:
                    f.write(content)
                os.replace(tmp, path)  # never a half-written file
            except BaseException:
                if os.path.exists(tmp):
                    os.unlink(tmp)
                raise
            return {
                "path": os.path.relpath(path, os.path.realpath(root)),
                "bytes": len(content.encode("utf-8")),
            }, False
        if name == "list_dir":
            path = _inside(root, args.get("path") or ".")
            names = sorted(e.name + ("/" if e.is_dir() else "") for e in os.scandir(path))
            return _cut("\n".join(names), max_output), False
        raise _Refused(f"unknown tool {name!r}; the tools are {', '.join(TOOL_NAMES)}")
    except _Refused as exc:
        return str(exc), True
    except OSError as exc:
        return f"{type(exc).__name__}: {exc.strerror or exc}", True

"""Workspace tools for the ``openai`` driver: run a command, read a file, write a file, list
a folder. Each is described to the model as a Chat Completions function tool
(:data:`TOOL_SPECS`) and run by :func:`run_tool`, which never raises for a bad call: it
returns ``(output, is_error)`` so the model sees what went wrong and can try again.

Paths are relative to the workspace (the bridge's working directory); a path that leaves
it (``..``, an absolute path elsewhere, a symlink out) is refused. Outputs are cut at
``max_output`` characters (the model's context is finite); the cut is said in the output.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Dict, List, Optional, Tuple

from .cli_process import cli_env
from .keeper import KeptCommand, interrupted_message

__all__ = ["TOOL_SPECS", "TOOL_NAMES", "run_tool", "run_command", "command_result"]

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
    command: str,
    cwd: str,
    timeout: float,
    cancelled: threading.Event,
    max_output: int,
    record: Optional[str] = None,
) -> Tuple[Dict[str, Any], bool]:
    """Run ``/bin/sh -c command`` in ``cwd`` in its own process group, without stdin, with the
    bridge's environment minus ``BRIDGE_CLIENT_*``, under a keeper
    (:class:`~bridge_client.drivers.keeper.KeptCommand`): it runs to its end and is recorded
    in ``record`` even when the bridge dies meanwhile, so a step run again in the next bridge
    takes its result (:func:`command_result`) instead of running it again.

    Args:
        timeout: seconds before the group is killed. cancelled: kills the group when set.
        max_output: characters of output kept. record: its record folder
            (:meth:`~bridge_client.drivers.keeper.KeptCommand.folder_for`; ``None``: a
            temporary one, removed at once).

    Returns:
        ``({"exitCode", "output", "timedOut", "cancelled"}, is_error)``; ``is_error`` when the
        code is not 0.

    Raises:
        OSError: the keeper cannot start (no record folder can be made).
    """
    kept = KeptCommand.start(record, ["/bin/sh", "-c", command], cwd, cli_env(), timeout, _KILL_GRACE)
    return command_result(kept, cancelled, max_output)


def command_result(kept: KeptCommand, cancelled: threading.Event, max_output: int) -> Tuple[Any, bool]:
    """Wait for the kept command (one this bridge started, or one an earlier bridge started
    and :meth:`~bridge_client.drivers.keeper.KeptCommand.adopt` found) and give its result as
    :func:`run_command` does; a command whose keeper is gone without its status gives
    ``{"interrupted": true, "output", "message"}`` (an error), one that could not start the
    message (an error)."""
    try:
        status = kept.wait(cancelled)
        output = kept.output_text(max_output)
    finally:
        kept.discard()
    if "exitCode" in status:
        code = status["exitCode"]
        result = {
            "exitCode": code,
            "output": output,
            "timedOut": bool(status.get("timedOut")),
            "cancelled": bool(status.get("cancelled")),
        }
        return result, code != 0
    if "error" in status:
        return f"cannot run /bin/sh: {status['error']}", True
    return {"interrupted": True, "output": output, "message": interrupted_message()}, True


def run_tool(
    name: str,
    args: Any,
    root: str,
    cancelled: threading.Event,
    command_timeout: float,
    max_output: int,
    record: Optional[str] = None,
) -> Tuple[Any, bool]:
    """Run one tool call in the workspace ``root``.

    Args:
        name: one of :data:`TOOL_NAMES`. args: the parsed JSON arguments (an object).
        cancelled: the turn's cancel event (stops a running command).
        command_timeout: the longest ``run_command`` timeout, seconds (the model may ask for
            less). max_output: characters of output kept. record: the record folder of a
            ``run_command`` (see :func:`run_command`).

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
            return run_command(
                command, root, min(float(timeout), command_timeout), cancelled, max_output, record
            )
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

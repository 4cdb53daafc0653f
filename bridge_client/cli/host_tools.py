"""``bridge-client run --tool MODULE:FUNCTION``: host tools from the command line.

Each ``--tool`` names a function by its module (importable from the current folder or
``PYTHONPATH``) and its name; the session gets them as ``CreateSessionOptions(tools=...)``
and runs them in this process. The agent's call of one shows as its tool lines (``[NAME]``
with the arguments, then ``[NAME ok]`` or ``[NAME error]``), like its own tools. See the
*Host tools* guide (``host-tools``).
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import sys
from typing import Any, List

from ..errors import BadHostTool
from ..host_tools import check_tools
from ..options import CreateSessionOptions
from .exits import UsageError

__all__ = ["add_tool_arguments", "with_tools", "load_tool"]

_HELP = (
    "a host tool for the agent: a Python function, as MODULE:FUNCTION (importable from the "
    "current folder or PYTHONPATH); it runs in this process (repeatable)"
)


def add_tool_arguments(p: argparse.ArgumentParser) -> None:
    """Add ``--tool MODULE:FUNCTION`` (repeatable) to a ``run``-like command."""
    p.add_argument("--tool", action="append", default=[], metavar="MODULE:FUNCTION", help=_HELP)


def load_tool(spec: str) -> Any:
    """Import the function ``MODULE:FUNCTION`` names.

    Raises:
        UsageError: not of that form, the module cannot be imported, or it has no such callable.
    """
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise UsageError(f"--tool {spec!r}: give MODULE:FUNCTION")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # an ImportError, or the module's own failure
        why = f"{type(exc).__name__}: {exc}"
        raise UsageError(f"--tool {spec!r}: cannot import {module_name}: {why}") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise UsageError(f"--tool {spec!r}: {module_name} has no function {name}")
    return fn


def with_tools(args: argparse.Namespace, session_options: CreateSessionOptions) -> CreateSessionOptions:
    """``session_options`` with the ``--tool`` functions of ``args`` (unchanged without any).

    Raises:
        UsageError: a tool cannot be loaded or offered (no type hints, a bad name, ...).
    """
    specs: List[str] = getattr(args, "tool", None) or []
    if not specs:
        return session_options
    tools = [load_tool(spec) for spec in specs]
    try:
        checked = check_tools(tools)
    except BadHostTool as exc:
        raise UsageError(f"--tool: {exc}") from None
    return dataclasses.replace(session_options, tools=checked)

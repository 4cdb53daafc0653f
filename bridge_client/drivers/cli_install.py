"""Where a CLI driver's program comes from, and whether the sandbox lets it skip the agent's
own permission checks.

:func:`find_cli` finds the program: the ``executable`` option as given, else the program on
``PATH``, else the copy the template installed into the sandbox's private prefix
(``<state root>/agents/<package>@<version>``, see the *Drivers* guide, :doc:`drivers/index`).
:func:`sandbox_isolated` reads what the template recorded about the sandbox.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Optional

__all__ = ["find_cli", "sandbox_isolated"]


def find_cli(program: str, package: str, version: str, executable: Optional[str]) -> str:
    """The program to run for a CLI driver.

    Args:
        program: the CLI's program name (``claude``).
        package, version: its npm (or PyPI) package and the version the template installs.
        executable: the driver's ``executable`` option (``None`` when not given).

    Returns:
        ``executable`` when given (never looked up further); else ``program`` when it is on
        ``PATH``; else the program in the private prefix when installed there
            (``node_modules/.bin`` of an npm prefix, ``bin`` of a Python venv); else
        ``program`` itself (starting it then fails with a clear :class:`CLIStartError`).
    """
    if executable:
        return executable
    if shutil.which(program):
        return program
    from ..sandbox.npm import private_prefix  # only when it is not on PATH
    from . import STATE_DIR  # set by the bridge program (<state root>/bridges/<bridge id>)

    if STATE_DIR:
        root = os.path.dirname(os.path.dirname(os.path.abspath(STATE_DIR)))
        prefix = private_prefix(root, package, version)
        # An npm prefix keeps its programs in node_modules/.bin; a Python venv in bin.
        npm = os.path.join(prefix, "node_modules", ".bin", program)
        for candidate in (npm, os.path.join(prefix, "bin", program)):
            if os.access(candidate, os.X_OK):
                return candidate
    return program


def sandbox_isolated() -> bool:
    """Whether the bridge's sandbox is isolated from the user's machine (a container; not a
    ``LocalSandbox``), as the template recorded under the state root. Only there may a driver
    skip the agent's own permission checks by default. ``False`` when unknown (no record, or
    outside a bridge)."""
    from . import STATE_DIR

    if not STATE_DIR:
        return False
    root = os.path.dirname(os.path.dirname(os.path.abspath(STATE_DIR)))
    try:
        with open(os.path.join(root, "agents", "sandbox.json"), encoding="utf-8") as f:
            return json.load(f).get("isolated") is True
    except (OSError, ValueError, AttributeError):
        return False

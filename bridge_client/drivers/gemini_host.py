"""Host tools for the ``gemini`` driver: the MCP server named ``host`` in the Gemini CLI's
system settings file, one per run of a turn.

The Gemini CLI reads a system settings file (the variable ``GEMINI_CLI_SYSTEM_SETTINGS_PATH``)
merged over the user's settings, its ``mcpServers`` added to the user's. It reads that file
only when the file and every folder above it are owned by root (uid 0) and writable by
neither group nor others; otherwise it skips the file with a security warning (so a file in
``/tmp``, writable by all, is never read, nor one in a folder of a user other than root).

So host tools work for a bridge that runs as root (a container's usual user):
:func:`host_settings` writes ``{"mcpServers": {"host": {..., "trust": true}}}`` (trusted: its
calls are not confirmed) into a new private folder (mode 0700) below the first of
:data:`BASES` whose folders pass that check, and removes it when the run ends. A settings
file the session's environment already names is merged in (its ``mcpServers`` kept beside
``host``). :func:`available` says whether that can work here; a bridge that cannot
(not root, no such folder) refuses a session with host tools with ``ToolsUnsupported``.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import tempfile
import threading
from typing import Any, Dict, Iterator, Optional

from ..bridge.child_process import session_env
from ..bridge.host_relay import mcp_server_config
from . import mcp_config

__all__ = ["available", "unavailable_reason", "host_settings", "settings_env", "BASES", "VARIABLE"]

VARIABLE = "GEMINI_CLI_SYSTEM_SETTINGS_PATH"
"""The variable naming the Gemini CLI's system settings file."""

BASES = ("/run/bridge-client", "/var/lib/bridge-client")
"""The folders (made when missing, mode 0700) that hold a run's settings folder."""

_LOCAL = threading.local()


def _secure(path: str) -> bool:
    """Whether ``path`` and every folder above it are the CLI's *secure*: owned by root,
    writable by neither group nor others."""
    path = os.path.realpath(path)
    while True:
        try:
            st = os.stat(path)
        except OSError:
            return False
        if st.st_uid != 0 or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return False
        parent = os.path.dirname(path)
        if parent == path:
            return True
        path = parent


def _base() -> Optional[str]:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None
    for base in BASES:
        try:
            os.makedirs(base, mode=0o700, exist_ok=True)
        except OSError:
            continue
        if _secure(base):
            return base
    return None


def available() -> bool:
    """Whether the Gemini CLI would read a system settings file this bridge writes (it runs
    as root, and one of :data:`BASES` is secure)."""
    return _base() is not None


def unavailable_reason() -> Optional[str]:
    """Why this bridge cannot give the Gemini CLI host tools, in plain words with the fix, or
    ``None`` when it can (:func:`available`)."""
    if _base() is not None:
        return None
    rule = (
        "the Gemini CLI reads the settings file that names the host tools' server only from a"
        " folder owned by root and writable by nobody else"
    )
    fix = (
        "run the bridge as root (a container's usual user), or use the Gemini CLI in ACP mode"
        " (the acp driver, command=gemini, args=[\"--experimental-acp\"]), which takes host tools"
        " as any user"
    )
    euid = os.geteuid() if hasattr(os, "geteuid") else None
    if euid != 0:
        return f"{rule}, and this bridge runs as uid {euid}, not root: {fix}"
    return f"{rule}, and neither {' nor '.join(BASES)} can be made so here: {fix}"


def _theirs() -> Dict[str, Any]:
    path = session_env().get(VARIABLE) or os.environ.get(VARIABLE)
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def settings_env() -> Dict[str, str]:
    """The environment the run this thread runs adds for its CLI: ``{VARIABLE: FILE}`` inside
    a :func:`host_settings` block with a relay, else ``{}``."""
    return dict(getattr(_LOCAL, "env", None) or {})


@contextlib.contextmanager
def host_settings() -> Iterator[Dict[str, str]]:
    """``{VARIABLE: FILE}`` for the CLI's environment while the run lasts (``{}`` without a
    current relay, :func:`bridge_client.drivers.mcp_config.current`), also given by
    :func:`settings_env` in this thread meanwhile. The file and its folder are removed when
    the block ends.

    Raises:
        OSError: the folder or file cannot be made (:func:`available` was false).
    """
    relay = mcp_config.current()
    base = _base() if relay is not None else None
    if relay is None or base is None:
        yield {}
        return
    folder = tempfile.mkdtemp(prefix="gemini-", dir=base)
    try:
        settings = _theirs()
        given = settings.get("mcpServers")
        servers: Dict[str, Any] = given if isinstance(given, dict) else {}
        host = {**mcp_server_config(relay), "trust": True}
        settings = {**settings, "mcpServers": {**servers, mcp_config.SERVER_NAME: host}}
        path = os.path.join(folder, "settings.json")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(settings, f)
        _LOCAL.env = {VARIABLE: path}
        yield {VARIABLE: path}
    finally:
        _LOCAL.env = None
        shutil.rmtree(folder, ignore_errors=True)

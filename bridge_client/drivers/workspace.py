"""The folder the built-in drivers work in: the bridge's working directory, set by its sandbox at
launch.

A local sandbox is named by its path, so after ``rm -rf repo && mkdir repo`` (or a fresh
``git clone`` into the same path) the client finds the bridge that was launched in the old
folder, whose working directory is now a removed one: every command would fail with a bare
``FileNotFoundError``. :func:`workspace_dir` moves the bridge into the folder now at that path,
the one the client asks for, and says so in the bridge's log.
"""
from __future__ import annotations

import errno
import logging
import os
import threading
from typing import Optional

__all__ = ["workspace_dir"]

log = logging.getLogger("bridge_client.bridge")

_lock = threading.Lock()


def _cwd() -> Optional[str]:
    try:
        return os.getcwd()
    except FileNotFoundError:
        return None


_last: Optional[str] = _cwd()  # the bridge's folder at start; then the last one seen


def workspace_dir() -> str:
    """Return the folder the agent works in (an absolute path).

    When the working directory was removed and a folder is again at its path, the process
    moves into that folder first (process-wide, as the working directory is).

    Raises:
        FileNotFoundError: the folder was removed and no folder is at its path; the message
            says so and how to go on.
    """
    global _last
    with _lock:
        here = _cwd()
        if here is not None:
            _last = here
            return here
        if _last is not None and os.path.isdir(_last):
            os.chdir(_last)
            log.warning("the workspace folder %s was removed and made again: working in the new one", _last)
            return _last
        raise FileNotFoundError(
            errno.ENOENT,
            "the workspace folder was removed while this bridge worked in it; make it again, or "
            "stop the bridge (bridge-client stop --all --sandbox DIR)",
            _last,
        )

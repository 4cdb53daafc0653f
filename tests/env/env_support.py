"""Helpers for the session-environment tests (tests/env) and the ACP tests (tests/acp): find a
bridge's state directory and pid, SIGKILL it by pid, and look for a secret in every file the
bridge keeps and in its command line."""
from __future__ import annotations

import json
import os
import signal
from typing import Any, List, Optional

from bridge_client.state_dir import identity
from host_support import _alive, wait_until


def state_dir(sandbox: Any, bridge_id: str) -> str:
    """The bridge's state directory in a LocalSandbox."""
    return identity.state_dir(sandbox.state_root, bridge_id)


def bridge_pid(sandbox: Any, bridge_id: str) -> Optional[int]:
    """The pid in the bridge's listening file, or ``None`` when there is no file."""
    path = os.path.join(state_dir(sandbox, bridge_id), identity.LISTENING_FILE)
    try:
        with open(path, "rb") as f:
            return int(json.loads(f.read())["pid"])
    except (OSError, ValueError, KeyError):
        return None


def sigkill_bridge(sandbox: Any, bridge_id: str) -> int:
    """SIGKILL the bridge named by its listening file and wait until it is gone; return its pid."""
    pid = bridge_pid(sandbox, bridge_id)
    assert pid is not None, "the bridge has no listening file"
    os.kill(pid, signal.SIGKILL)
    assert wait_until(lambda: not _alive(pid), timeout=10.0), f"bridge {pid} survived SIGKILL"
    return pid


def files_holding(folder: str, secret: bytes) -> List[str]:
    """Every file under ``folder`` (the store, its WAL, bridge.log, launch.json, ...) whose
    bytes hold ``secret``; the list of files looked at must not be empty."""
    found: List[str] = []
    looked = 0
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except OSError:
                continue
            looked += 1
            if secret in data:
                found.append(os.path.relpath(path, folder))
    assert looked >= 3, f"only {looked} files under {folder}"
    return found


def proc_file(pid: int, name: str) -> bytes:
    """``/proc/<pid>/<name>`` (``cmdline``, ``environ``)."""
    with open(f"/proc/{pid}/{name}", "rb") as f:
        return f.read()

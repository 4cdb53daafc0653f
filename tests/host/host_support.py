"""Helpers for host-side tests: cleanup of bridge processes by pid, polling, options."""
from __future__ import annotations

import os
import signal
import time
from typing import List

import bridge_client as bc

SECRET = "test-secret-not-for-production"


def _pids_under(folder: str) -> List[int]:
    """Pids of processes whose working folder is inside ``folder`` (bridges run in their
    workspace) or whose environment names a state directory inside it."""
    found = []
    prefix = os.path.realpath(folder)
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        if cwd == prefix or cwd.startswith(prefix + os.sep):
            found.append(int(entry))
    return found


def kill_all_under(folder: str, grace: float = 3.0) -> None:
    """SIGTERM every process working inside ``folder``, then SIGKILL what is left."""
    pids = _pids_under(folder)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if _alive(p)]
        time.sleep(0.02)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.02) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` seconds pass; return its last value."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return bool(predicate())
        time.sleep(interval)


def session_options(sandbox, **kw) -> bc.CreateSessionOptions:
    """Session options with short test timeouts."""
    kw.setdefault("launch_timeout", 20.0)
    kw.setdefault("resend_window", 10.0)
    kw.setdefault("ping_interval", 1.0)
    kw.setdefault("ping_timeout", 2.0)
    return bc.CreateSessionOptions(workspace=bc.Workspace(sandbox), **kw)


def options(driver: str = "shell", **kw) -> bc.BridgeOptions:
    """Bridge options of this package's bridge; leftover bridges exit after 60 s unused."""
    kw.setdefault("bridge_idle_timeout", 60.0)
    return bc.bridge_options(driver, secret=SECRET, **kw)


def bridge_killing_lookup(value: int = 7):
    """``(lookup, calls, holder)``: a host tool ``lookup(key)`` that records each call in
    ``calls`` and SIGKILLs the bridge of ``holder["session"]`` (by pid) during its first call,
    then answers ``{"key": key, "value": value}``: the worst moment for a host function."""
    calls: List[str] = []
    holder: dict = {}

    def lookup(key: str) -> dict:
        """Look a key up.

        Args:
            key: the key.
        """
        calls.append(key)
        if len(calls) == 1:
            os.kill(holder["session"]._hello.pid, signal.SIGKILL)  # the bridge dies mid-call
        return {"key": key, "value": value}

    return lookup, calls, holder

"""What a driver's child processes need from the bridge: the environment they run with (the
bridge's own minus ``BRIDGE_CLIENT_*``, the session's over it) and the process groups the
bridge kills when it abandons a turn that ignored its cancel.

The thread-local of the turn a thread runs lives here; :class:`~bridge_client.bridge.context.TurnContext`
binds it. Drivers import these names from :mod:`bridge_client.bridge.driver`.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Dict, Iterator, List, Mapping, Optional, Set

__all__ = [
    "process_group_started",
    "process_group_ended",
    "child_environ",
    "session_env",
    "ProcessGroups",
    "bind_groups",
    "bound_env",
    "ReadOnlyEnv",
]

# .groups: the ProcessGroups of the turn whose run_turn this thread runs; .env: that turn's
# session environment
_current = threading.local()


def process_group_started(pgid: int) -> None:
    """Tell the bridge that the turn this thread runs has a child in process group ``pgid``
    (a process started with ``start_new_session=True`` leads its own group; pass its pid).

    When the turn ignores a cancel beyond the bridge's grace period, the bridge ends the turn
    itself and kills the groups its driver reported (SIGKILL). Call :func:`process_group_ended`
    once the process was reaped. Harmless outside a turn's thread (nothing is recorded).
    See :doc:`resilience`.
    """
    groups = getattr(_current, "groups", None)
    if groups is not None:
        groups.add(pgid)


def process_group_ended(pgid: int) -> None:
    """The process that leads group ``pgid`` was reaped: the bridge must no longer kill that
    group (its id may be reused). Harmless for a group never reported."""
    groups = getattr(_current, "groups", None)
    if groups is not None:
        groups.discard(pgid)

_RESERVED_PREFIX = "BRIDGE_CLIENT_"


def session_env() -> Dict[str, str]:
    """The session environment of the turn that the calling thread runs (a copy; empty outside
    a turn's thread). For code that starts processes without a :class:`TurnContext` at hand;
    a driver that has one reads :attr:`TurnContext.env`."""
    env = getattr(_current, "env", None)
    return dict(env) if env else {}


def child_environ(
    env: Optional[Mapping[str, str]] = None, extra: Optional[Mapping[str, str]] = None
) -> Dict[str, str]:
    """The environment a driver's child process runs with: the bridge's own minus every
    ``BRIDGE_CLIENT_*`` variable, then the session's environment over it (``env``, or by
    default :func:`session_env` of this thread), then ``extra`` over both.

    The bridge's own ``os.environ`` is never changed: two sessions with different
    environments can run turns at once in one bridge.

    Returns:
        A new dict of names to values, for ``subprocess.Popen(env=...)``.
    """
    out = {k: v for k, v in os.environ.items() if not k.startswith(_RESERVED_PREFIX)}
    out.update(session_env() if env is None else env)
    if extra:
        out.update(extra)
    return out



class ProcessGroups:
    """The process groups one run of a turn reported (:func:`process_group_started`) and not
    yet reported ended. Every method may be called from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: Set[int] = set()

    def add(self, pgid: int) -> None:
        """Record group ``pgid``."""
        with self._lock:
            self._groups.add(pgid)

    def discard(self, pgid: int) -> None:
        """Forget group ``pgid`` (its leader was reaped: the id may be reused)."""
        with self._lock:
            self._groups.discard(pgid)

    def kill_all(self) -> List[int]:
        """SIGKILL every recorded group and forget them all. Returns the groups signalled."""
        with self._lock:
            groups, self._groups = sorted(self._groups), set()
        killed = []
        for group in groups:
            try:
                os.killpg(group, signal.SIGKILL)
                killed.append(group)
            except OSError:  # gone already, or not ours any more
                pass
        return killed


def bind_groups(groups: ProcessGroups) -> None:
    """Make ``groups`` where :func:`process_group_started` records in the calling thread."""
    _current.groups = groups


@contextlib.contextmanager
def bound_env(env: Dict[str, str]) -> Iterator[None]:
    """Make ``env`` the calling thread's :func:`session_env` while the block runs."""
    previous = getattr(_current, "env", None)
    _current.env = env
    try:
        yield
    finally:
        _current.env = previous


class ReadOnlyEnv(Mapping[str, str]):
    """A read-only view of a dict whose repr hides the values (they may be secrets)."""

    __slots__ = ("_data",)

    def __init__(self, data: Dict[str, str]) -> None:
        self._data = data

    def __getitem__(self, key: str) -> str:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return "{" + ", ".join(f"{k!r}: <redacted>" for k in self._data) + "}"

"""Warm CLI processes: a session's agent CLI process kept between its turns, for a CLI that
takes its next prompt on a running process (Claude Code's stream-json input: a user message
written after its ``result`` message starts the next turn of the same conversation).

A :class:`WarmPool` holds, per bridge session, the process its last turn left when that turn
ended cleanly (its ``result``, no cancel, the process running), with the key of what the
process was started with (its command line without the resumed session, its variables) and
the CLI session it holds. The session's next turn takes it when the key and the CLI session
are the same, and writes its prompt to it; otherwise the pool's process is stopped and the turn
starts a new one, with the CLI's own resume. A process left unused ``agent_idle_timeout``
seconds is stopped (:mod:`.idle_reaper`), as is the session's process when the session closes
and every process when the bridge exits. A bridge that restarts starts cold.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Dict, Hashable, List, NamedTuple, Optional

from .cli_process import JsonLinesProcess
from .idle_reaper import IdleReaper
from .mcp_config import AgentRelay

__all__ = ["WarmPool", "Warm"]


class Warm(NamedTuple):
    """A warm process: the CLI, the host tools' relay it was started with (``None`` without
    host tools; it lives as long as the process), what it was started with (``key``), the
    CLI session it holds, and when its last turn ended (``time.monotonic()``)."""

    proc: JsonLinesProcess
    relay: Optional[AgentRelay]
    key: Hashable
    cli_session: Optional[str]
    since: float = 0.0

    def stop(self) -> None:
        """End the process, then its relay."""
        self.proc.stop()
        if self.relay is not None:
            self.relay.close()


class WarmPool:
    """The idle warm processes of one driver, one per bridge session (see the module
    docstring). Every method may be called from any thread.

    Args:
        idle_timeout: seconds > 0 a process may stay unused, or ``None``: until the session
            closes or the bridge exits.
    """

    def __init__(self, idle_timeout: Optional[float]) -> None:
        self._lock = threading.Lock()
        self._idle: Dict[str, Warm] = {}
        self._closed = False
        self.reaper = IdleReaper(idle_timeout, self._reap)

    def take(self, session_id: str, key: Hashable, cli_session: Optional[str]) -> Optional[Warm]:
        """The session's warm process, when it was started with ``key``, holds the CLI session
        ``cli_session`` and still runs (its output since its last turn is dropped); else
        ``None`` (a process that does not fit is stopped)."""
        with self._lock:
            warm = self._idle.pop(session_id, None)
        if warm is None:
            return None
        if warm.key == key and warm.cli_session == cli_session and _drained(warm.proc):
            return warm
        warm.stop()
        return None

    def keep(self, session_id: str, warm: Warm) -> None:
        """Keep ``warm`` (its turn just ended cleanly) for the session's next turn."""
        warm = warm._replace(since=time.monotonic())
        with self._lock:
            closed = self._closed
            old = None if closed else self._idle.get(session_id)
            if not closed:
                self._idle[session_id] = warm
        if old is not None:
            old.stop()
        if closed:
            warm.stop()
            return
        self.reaper.start()

    def keep_or_stop(self, ctx: Any, run: Warm, clean: bool) -> None:
        """After a turn on ``run``: keep it for the session's next turn when the turn ended
        cleanly (``clean``, no cancel) and the process runs, holding the CLI session the
        session state names now (``{"session_id": ...}``); else stop it."""
        if clean and not ctx.cancelled.is_set() and run.proc.proc.poll() is None:
            data = ctx.state.data
            value = data.get("session_id") if isinstance(data, dict) else None
            held = value if isinstance(value, str) and value else None
            self.keep(ctx.session_id, run._replace(cli_session=held))
        else:
            run.stop()

    def drop(self, session_id: str) -> None:
        """Stop the session's warm process, if it has one (the session closed)."""
        with self._lock:
            warm = self._idle.pop(session_id, None)
        if warm is not None:
            warm.stop()

    def close(self) -> None:
        """Stop every warm process, and keep none from now on (the bridge is shutting down)."""
        self.reaper.close()
        with self._lock:
            self._closed = True
            idle, self._idle = list(self._idle.values()), {}
        for warm in idle:
            warm.stop()

    def _reap(self, now: float) -> int:
        timeout = self.reaper.timeout
        assert timeout is not None
        with self._lock:
            old: List[Warm] = []
            for session_id, warm in list(self._idle.items()):
                if now - warm.since >= timeout:
                    old.append(self._idle.pop(session_id))
        for warm in old:
            warm.stop()
        return len(old)


def _drained(proc: JsonLinesProcess) -> bool:
    """Drop what ``proc`` printed since its last turn; False when it is gone."""
    if proc.proc.poll() is not None:
        return False
    while True:
        event = proc.next_event(0)
        if event is None:
            return True
        if event is JsonLinesProcess.EOF:
            return False

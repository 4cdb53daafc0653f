"""The ``acp`` driver's bookkeeping of its agent processes: one :class:`AgentProcess` per
running agent, one :class:`Slot` per bridge session (see :mod:`bridge_client.drivers.acp`)."""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, List, Optional

from .acp_host import AgentRelay
from .acp_rpc import AcpConnection
from .cli_process import JsonLinesProcess

__all__ = ["AgentProcess", "Slot", "IdleReaper", "stop_least_used"]


class AgentProcess:
    """One agent process and what the driver knows of it (guarded by its slot's lock):
    its connection, the environment it was started with, its ``initialize`` answer, its open
    ACP session, and the host tools' relay it was given (``None`` without host tools)."""

    def __init__(
        self, proc: JsonLinesProcess, env: Dict[str, str], relay: Optional[AgentRelay] = None
    ) -> None:
        self.proc = proc
        self.conn = AcpConnection(proc)
        self.env = env
        self.capabilities: Dict[str, Any] = {}
        self.auth_methods: List[Any] = []
        self.session_id: Optional[str] = None
        self.relay = relay
        self.last_used = time.monotonic()

    @property
    def alive(self) -> bool:
        """Whether the process runs and its connection is open."""
        return not self.conn.gone and self.proc.proc.poll() is None


class Slot:
    """A session's place in the driver: one turn at a time (``lock``), and its agent."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.agent: Optional[AgentProcess] = None
        self.closed = False  # the session was closed while a turn ran: stop the agent after it


def stop_least_used(slots: List[Slot], keep: int, stop: Callable[[Slot], None]) -> None:
    """Stop the agents of the least recently used of ``slots`` (slots with an agent) until at
    most ``keep`` run; a slot whose session runs a turn is skipped (its lock is held)."""
    slots = sorted(slots, key=lambda s: s.agent.last_used if s.agent is not None else 0.0)
    for slot in slots[: max(0, len(slots) - keep)]:
        if slot.lock.acquire(blocking=False):
            try:
                stop(slot)
            finally:
                slot.lock.release()


class IdleReaper:
    """Stops agent processes left unused ``timeout`` seconds (the ``agent_idle_timeout``
    option): a daemon thread, started with the first agent, that looks every
    ``min(timeout / 4, 30)`` seconds (at least 0.05). An agent whose session runs a turn is
    never stopped (its slot's lock is held); the session's next turn starts the agent again,
    as after a restart.

    Args:
        timeout: seconds > 0, or ``None``: never stop an idle agent.
        slots: returns the driver's slots now. stop: ends a slot's agent (called with the
            slot's lock held).
    """

    def __init__(
        self, timeout: Optional[float], slots: Callable[[], List[Slot]], stop: Callable[[Slot], None]
    ) -> None:
        self.timeout = timeout
        self._slots, self._stop = slots, stop
        self._closed = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the thread (once; nothing without a timeout or after :meth:`close`)."""
        with self._lock:
            if self.timeout is None or self._thread is not None or self._closed.is_set():
                return
            self._thread = threading.Thread(target=self._run, name="acp-idle-reaper", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """End the thread (the driver is closing); returns at once."""
        self._closed.set()

    def reap(self, now: Optional[float] = None) -> int:
        """Stop every agent unused ``timeout`` seconds as of ``now`` (``time.monotonic()``);
        returns how many were stopped."""
        if self.timeout is None:
            return 0
        now = time.monotonic() if now is None else now
        stopped = 0
        for slot in self._slots():
            agent = slot.agent
            if agent is None or now - agent.last_used < self.timeout:
                continue
            if slot.lock.acquire(blocking=False):  # else a turn of its session runs
                try:  # closed meanwhile: its session_closed found the lock held (by us)
                    agent = slot.agent
                    if agent is not None and (slot.closed or now - agent.last_used >= self.timeout):
                        self._stop(slot)
                        stopped += 1
                finally:
                    slot.lock.release()
        return stopped

    def _run(self) -> None:
        assert self.timeout is not None
        tick = max(0.05, min(self.timeout / 4, 30.0))  # a tiny timeout is no busy loop
        while not self._closed.wait(tick):
            self.reap()

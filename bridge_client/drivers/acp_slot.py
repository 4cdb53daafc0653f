"""The ``acp`` driver's bookkeeping of its agent processes: one :class:`AgentProcess` per
running agent, one :class:`Slot` per bridge session (see :mod:`bridge_client.drivers.acp`)."""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, List, Optional

from .acp_host import AgentRelay
from .acp_rpc import AcpConnection
from .cli_process import JsonLinesProcess

__all__ = ["AgentProcess", "Slot", "reap_idle", "stop_least_used"]


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


def reap_idle(slots: List[Slot], timeout: float, stop: Callable[[Slot], None], now: float) -> int:
    """Stop the agent of each of ``slots`` unused ``timeout`` seconds as of ``now``
    (``time.monotonic()``), or whose session closed; returns how many. An agent whose session
    runs a turn is never stopped (its slot's lock is held); the session's next turn starts the
    agent again, as after a restart."""
    stopped = 0
    for slot in slots:
        agent = slot.agent
        if agent is None or now - agent.last_used < timeout:
            continue
        if slot.lock.acquire(blocking=False):  # else a turn of its session runs
            try:  # closed meanwhile: its session_closed found the lock held (by us)
                agent = slot.agent
                if agent is not None and (slot.closed or now - agent.last_used >= timeout):
                    stop(slot)
                    stopped += 1
            finally:
                slot.lock.release()
    return stopped

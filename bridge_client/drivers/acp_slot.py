"""The ``acp`` driver's bookkeeping of its agent processes: one :class:`AgentProcess` per
running agent, one :class:`Slot` per bridge session (see :mod:`bridge_client.drivers.acp`)."""
from __future__ import annotations

import threading
import time
from typing import Any, Dict, List, Optional

from .acp_host import AgentRelay
from .acp_rpc import AcpConnection
from .cli_process import JsonLinesProcess

__all__ = ["AgentProcess", "Slot"]


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

"""A port of the remote loopback reached through the SSH transport (like ``ssh -L``).

:class:`Forwarder` listens on the host's loopback; each connection it accepts gets its own
``direct-tcpip`` channel of the link's current transport to ``127.0.0.1:<port>`` on the
remote machine, and bytes are copied both ways. So the bridge listens on the remote loopback
only and nothing else of the remote machine is reachable. When the transport drops, the open
connections end (their readers see the drop and resend); the next connection accepted opens
its channel on the link's new transport. See :doc:`scaling`.
"""
from __future__ import annotations

import time
from typing import Any

from .loopback_relay import CHUNK, LoopbackRelay
from .ssh_link import SSHLink

__all__ = ["Forwarder"]


class Forwarder(LoopbackRelay):
    """A loopback listener whose connections go to ``127.0.0.1:<remote_port>`` over SSH.

    Args:
        link: the SSH link whose transport carries the channels.
        remote_port: the port on the remote machine's loopback.

    Attributes:
        port: the host port (on 127.0.0.1) to connect to.
        remote_port: the port on the remote machine.

    Threads: one accepting, and two per open connection; all are daemons and end when
    :meth:`close` is called or either side closes.
    """

    def __init__(self, link: SSHLink, remote_port: int) -> None:
        self._link = link
        self.remote_port = int(remote_port)
        super().__init__(f"{link.target.name} port {self.remote_port}", "ssh forward")

    def _open_far(self) -> Any:
        # A connection waits for the link's reconnect at most one connect timeout: the
        # caller's own open timeout and resends decide how long to keep trying.
        target = self._link.target
        transport = self._link.transport(time.monotonic() + target.connect_timeout)
        return transport.open_channel(
            "direct-tcpip", ("127.0.0.1", self.remote_port), ("127.0.0.1", 0),
            timeout=target.connect_timeout,
        )

    def _copy_down(self, far: Any, client: Any) -> None:
        while True:
            data = far.recv(CHUNK)
            if not data:
                return
            client.sendall(data)

    def _end_up(self, far: Any) -> None:
        far.shutdown_write()

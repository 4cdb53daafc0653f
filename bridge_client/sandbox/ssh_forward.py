"""A port of the remote loopback reached through the SSH transport (like ``ssh -L``).

:class:`Forwarder` listens on the host's loopback; each connection it accepts gets its own
``direct-tcpip`` channel of the link's current transport to ``127.0.0.1:<port>`` on the
remote machine, and bytes are copied both ways. So the bridge listens on the remote loopback
only and nothing else of the remote machine is reachable. When the transport drops, the open
connections end (their readers see the drop and resend); the next connection accepted opens
its channel on the link's new transport. See :doc:`scaling`.
"""
from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any, Set

from .ssh_link import SSHLink

__all__ = ["Forwarder"]

log = logging.getLogger("bridge_client")

_CHUNK = 65536


def _close(sock: Any) -> None:
    try:
        sock.close()
    except Exception:
        pass


class Forwarder:
    """A loopback listener whose connections go to ``127.0.0.1:<remote_port>`` over SSH.

    Args:
        link: the SSH link whose transport carries the channels.
        remote_port: the port on the remote machine's loopback.

    Attributes:
        port: the host port (on 127.0.0.1) to connect to.

    Threads: one accepting, and two per open connection; all are daemons and end when
    :meth:`close` is called or either side closes.
    """

    def __init__(self, link: SSHLink, remote_port: int) -> None:
        self._link = link
        self.remote_port = int(remote_port)
        self._name = f"{link.target.name} port {self.remote_port}"
        self._lock = threading.Lock()
        self._open: Set[Any] = set()
        self._closed = False
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._acceptor = threading.Thread(
            target=self._accept_loop, name=f"ssh forward {self._name}", daemon=True
        )
        self._acceptor.start()

    def _track(self, *items: Any) -> bool:
        with self._lock:
            if self._closed:
                return False
            self._open.update(items)
            return True

    def _forget(self, *items: Any) -> None:
        with self._lock:
            self._open.difference_update(items)
        for item in items:
            if isinstance(item, socket.socket):
                try:
                    item.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            _close(item)

    def _accept_loop(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            if not self._track(client):
                _close(client)
                return
            threading.Thread(
                target=self._serve, args=(client,), name=f"ssh forward {self._name} conn", daemon=True
            ).start()

    def _channel(self) -> Any:
        # A connection waits for the link's reconnect at most one connect timeout: the
        # caller's own open timeout and resends decide how long to keep trying.
        target = self._link.target
        transport = self._link.transport(time.monotonic() + target.connect_timeout)
        return transport.open_channel(
            "direct-tcpip", ("127.0.0.1", self.remote_port), ("127.0.0.1", 0),
            timeout=target.connect_timeout,
        )

    def _serve(self, client: socket.socket) -> None:
        try:
            chan = self._channel()
        except Exception as exc:  # refused on the remote side, or the host is gone
            log.debug("ssh forward %s: no channel: %s", self._name, exc)
            self._forget(client)
            return
        if not self._track(chan):
            self._forget(client, chan)
            return
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=self._upstream, args=(client, chan), daemon=True).start()
        try:
            while True:
                data = chan.recv(_CHUNK)
                if not data:
                    break
                client.sendall(data)
        except Exception:  # the transport dropped, or the host side closed
            pass
        finally:
            self._forget(client, chan)

    def _upstream(self, client: socket.socket, chan: Any) -> None:
        try:
            while True:
                data = client.recv(_CHUNK)
                if not data:
                    break
                chan.sendall(data)
            chan.shutdown_write()  # the remote side sees EOF, answers the rest, and closes
        except Exception:
            self._forget(client, chan)

    def close(self) -> None:
        """Stop listening and cut every open connection. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            items = list(self._open)
            self._open.clear()
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        except OSError:
            pass
        _close(self._listener)
        self._forget(*items)
        if threading.current_thread() is not self._acceptor:
            self._acceptor.join(timeout=2.0)

    def __repr__(self) -> str:
        return f"Forwarder({self._name}, port={self.port}{', closed' if self._closed else ''})"

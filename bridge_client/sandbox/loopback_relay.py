"""A listener on the host's loopback whose connections are relayed to a port elsewhere (the
shape of ``ssh -L`` and ``kubectl port-forward``), for the SSH forwarder and the Docker exec
tunnel. Each subclass says how to open the far end of one connection and how to read it.

Threads: one accepting, and two per open connection (one each way); all are daemons and end
when :meth:`LoopbackRelay.close` is called or either side closes.
"""
from __future__ import annotations

import logging
import socket
import threading
from typing import Any, Set

__all__ = ["LoopbackRelay"]

log = logging.getLogger("bridge_client")

CHUNK = 65536
"""The most bytes read at once from either side."""


def close_quietly(sock: Any) -> None:
    """Close ``sock``; a failure to close is not an error of the relay."""
    try:
        sock.close()
    except Exception:
        pass


class LoopbackRelay:
    """Listens on ``127.0.0.1`` (a free port) and relays each accepted connection.

    Subclasses implement ``_open_far``, ``_copy_down`` and ``_end_up`` (and may change ``_cut``).

    Args:
        name: for thread names and log messages (``"container abc123 port 8000"``).
        kind: the first word of thread names (``"tunnel"``, ``"ssh forward"``).

    Attributes:
        port: the host port (on 127.0.0.1) to connect to.
    """

    def __init__(self, name: str, kind: str) -> None:
        self._name = name
        self._kind = kind
        self._lock = threading.Lock()
        self._open: Set[Any] = set()
        self._closed = False
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._acceptor = threading.Thread(target=self._accept_loop, name=f"{kind} {name}", daemon=True)
        self._acceptor.start()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    # -- what a subclass says ------------------------------------------------------------------

    def _open_far(self) -> Any:
        """Open the far end of one connection (it needs ``sendall``, ``close``). Any exception
        drops just that connection."""
        raise NotImplementedError

    def _copy_down(self, far: Any, client: socket.socket) -> None:
        """Copy what the far end sends to ``client`` until the far end ends (exceptions end
        the connection)."""
        raise NotImplementedError

    def _end_up(self, far: Any) -> None:
        """The client sent its last byte: tell the far end (a half close)."""
        raise NotImplementedError

    def _cut(self, item: Any) -> None:
        """Cut one side of a connection at once (both directions), then close it."""
        if isinstance(item, socket.socket):
            try:
                item.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        close_quietly(item)

    # -- the relay -------------------------------------------------------------------------------

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
            self._cut(item)

    def _accept_loop(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            if not self._track(client):
                close_quietly(client)
                return
            threading.Thread(
                target=self._serve, args=(client,), name=f"{self._kind} {self._name} conn", daemon=True
            ).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            far = self._open_far()
        except Exception as exc:  # refused on the far side, or the far machine is gone
            log.debug("%s %s: cannot open the far end: %s", self._kind, self._name, exc)
            self._forget(client)
            return
        if not self._track(far):
            self._forget(client, far)
            return
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=self._copy_up, args=(client, far), daemon=True).start()
        try:
            self._copy_down(far, client)
        except Exception:  # the far side dropped, or the host side closed
            pass
        finally:
            self._forget(client, far)  # the far end ended: end the host connection too

    def _copy_up(self, client: socket.socket, far: Any) -> None:
        try:
            while True:
                data = client.recv(CHUNK)
                if not data:
                    break
                far.sendall(data)
            self._end_up(far)  # the far side sees EOF, answers the rest, and closes
        except Exception:
            self._forget(client, far)

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
        close_quietly(self._listener)
        for item in items:
            self._cut(item)
        if threading.current_thread() is not self._acceptor:
            self._acceptor.join(timeout=2.0)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self._name}, port={self.port}"
                f"{', closed' if self._closed else ''})")

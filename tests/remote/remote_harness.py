"""A remote endpoint on this machine: a TLS-terminating forwarder in front of a real bridge
(which speaks plain ws on loopback), a sandbox whose ``expose()`` returns its ``wss://`` URL,
and an HTTP CONNECT proxy. Every thread here is bounded: accept loops poll a stop flag, each
connection has a fixed number of pump threads, and :meth:`close` joins them all."""
from __future__ import annotations

import base64
import socket
import ssl
import threading
from typing import Dict, List, Optional, Tuple

import bridge_client as bc

_POLL = 0.1  # seconds between looks at the stop flag
_MAX_CONNECTIONS = 64


def _pump(
    src: socket.socket, dst: socket.socket, stop: threading.Event, first: Optional[List[bytes]] = None
) -> None:
    """Copy bytes from ``src`` to ``dst`` until either side ends or ``stop`` is set; keep the
    first chunk in ``first`` (the HTTP upgrade request, for tests to look at)."""
    src.settimeout(_POLL)
    try:
        while not stop.is_set():
            try:
                data = src.recv(65536)
            except (socket.timeout, ssl.SSLWantReadError):
                continue
            if not data:
                break
            if first is not None and not first:
                first.append(data)
            dst.sendall(data)
    except (OSError, ssl.SSLError):
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Server:
    """A listening socket on 127.0.0.1 with an accept thread and bounded handler threads."""

    name = "server"

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(_POLL)
        self.port: int = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._threads: List[threading.Thread] = []
        self._sockets: List[socket.socket] = []
        self._lock = threading.Lock()
        self.accepted = 0
        self._acceptor = threading.Thread(
            target=self._accept_loop, name=f"test-{self.name}-accept", daemon=True
        )
        self._acceptor.start()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                break
            with self._lock:
                if self.accepted >= _MAX_CONNECTIONS:
                    conn.close()
                    continue
                self.accepted += 1
                self._sockets.append(conn)
            self._spawn(self._handle, conn)

    def _spawn(self, target, *args) -> None:  # type: ignore[no-untyped-def]
        thread = threading.Thread(target=target, args=args, name=f"test-{self.name}-conn", daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _keep(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)

    def _handle(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def _pipe(self, a: socket.socket, b: socket.socket, first: Optional[List[bytes]] = None) -> None:
        """Pump both ways: one thread each way, both joined by close()."""
        self._spawn(_pump, b, a, self._stop)
        _pump(a, b, self._stop, first)

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        self._acceptor.join(timeout=5)
        with self._lock:
            sockets, threads = list(self._sockets), list(self._threads)
        for s in sockets:
            try:
                s.close()
            except OSError:
                pass
        for t in threads:
            t.join(timeout=5)


class TlsForwarder(_Server):
    """Terminates TLS with ``context`` and forwards the bytes to ``127.0.0.1:target``.

    Attributes:
        requests: the first bytes each client sent (its HTTP upgrade request).
    """

    name = "tls"

    def __init__(self, target: int, context: ssl.SSLContext) -> None:
        self.target = target
        self.context = context
        self._firsts: List[List[bytes]] = []
        self.handshake_failures = 0
        super().__init__()

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        try:
            tls = self.context.wrap_socket(conn, server_side=True)
        except (OSError, ssl.SSLError):
            with self._lock:
                self.handshake_failures += 1
            conn.close()
            return
        self._keep(tls)
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target), timeout=5)
        except OSError:
            tls.close()
            return
        self._keep(upstream)
        first: List[bytes] = []
        with self._lock:
            self._firsts.append(first)
        self._pipe(tls, upstream, first)

    @property
    def requests(self) -> List[bytes]:
        """The first bytes each client sent through the tunnel (its HTTP upgrade request)."""
        with self._lock:
            return [f[0] for f in self._firsts if f]


class ConnectProxy(_Server):
    """An HTTP proxy that serves ``CONNECT host:port`` only (a tunnel), as corporate proxies
    do for ``wss://``. Host names in ``hosts`` are resolved to the address given there.

    Attributes:
        connects: ``(target, Proxy-Authorization header or None)`` for each CONNECT.
    """

    name = "proxy"

    def __init__(self, hosts: Dict[str, str]) -> None:
        self.hosts = hosts
        self.connects: List[Tuple[str, Optional[str]]] = []
        super().__init__()

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        head = b""
        try:
            while b"\r\n\r\n" not in head and len(head) < 16384:
                data = conn.recv(4096)
                if not data:
                    return
                head += data
        except OSError:
            return
        lines = head.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
        method, target, _ = (lines[0].split(" ") + ["", ""])[:3]
        auth = None
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "proxy-authorization":
                auth = value.strip()
        with self._lock:
            self.connects.append((target, auth))
        if method != "CONNECT":
            conn.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
            return
        host, _, port = target.rpartition(":")
        try:
            upstream = socket.create_connection((self.hosts.get(host, host), int(port)), timeout=5)
        except (OSError, ValueError):
            conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            return
        self._keep(upstream)
        conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        self._pipe(conn, upstream)


def server_context(ca, *hosts: str) -> ssl.SSLContext:  # type: ignore[no-untyped-def]
    """A server-side TLS context with a certificate of the trustme ``ca`` for ``hosts``."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*hosts).configure_cert(context)
    return context


def basic(user: str, password: str) -> str:
    """The ``Proxy-Authorization`` value for ``user:password``."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


class RemoteSandbox(bc.LocalSandbox):
    """A local sandbox reached like a provider's: ``expose(port)`` starts a TLS forwarder in
    front of the bridge's port and returns ``wss://<host>:<forwarder port>/`` with
    ``headers``. With ``scheme="ws"`` it returns the bridge's own port under ``host``."""

    def __init__(
        self,
        path: str,
        context: Optional[ssl.SSLContext],
        host: str = "localhost",
        headers: Tuple[Tuple[str, str], ...] = (),
        scheme: str = "wss",
    ) -> None:
        super().__init__(path)
        self.context = context
        self.host = host
        self.headers = headers
        self.scheme = scheme
        self.forwarders: Dict[int, TlsForwarder] = {}
        self._flock = threading.Lock()

    def expose(self, port: int) -> bc.Endpoint:
        if self.scheme == "ws":
            return bc.Endpoint(f"ws://{self.host}:{int(port)}/", self.headers)
        assert self.context is not None
        with self._flock:
            forwarder = self.forwarders.get(port)
            if forwarder is None:
                forwarder = self.forwarders[port] = TlsForwarder(port, self.context)
        return bc.Endpoint(f"wss://{self.host}:{forwarder.port}/", self.headers)

    def close(self) -> None:
        with self._flock:
            forwarders = list(self.forwarders.values())
        for f in forwarders:
            f.close()

    @property
    def upgrade_requests(self) -> List[bytes]:
        with self._flock:
            forwarders = list(self.forwarders.values())
        return [r for f in forwarders for r in f.requests]

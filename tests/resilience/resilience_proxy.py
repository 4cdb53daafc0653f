"""A TCP proxy that tests put between the host and the bridge, and command to misbehave.

:class:`Proxy` forwards bytes both ways between a client and one upstream port, with one
accept thread and two pump threads per connection (all daemon threads that stop on
:meth:`Proxy.close` within a fraction of a second). Tests command it to:

- :meth:`Proxy.drop_all`: close every connection, with a TCP reset (``SO_LINGER`` 0) or a
  clean FIN;
- :meth:`Proxy.blackhole`: keep the sockets open and pass nothing either way (a half-open
  connection as a sleeping laptop or a dead NAT entry gives it);
- :meth:`Proxy.set_delay`: wait before forwarding every piece;
- :meth:`Proxy.drop_when`: drop every connection when bytes from the bridge contain a
  pattern (before or after forwarding them), a given number of times.

:class:`ProxySandbox` wraps a sandbox so that ``expose(port)`` returns a proxy in front of
the bridge's port (one proxy per port: a restarted bridge gets a new one).
"""
from __future__ import annotations

import select
import socket
import struct
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

import bridge_client as bc

_TICK = 0.05  # seconds a pump or the accept loop waits before looking at its flags again
_PIECE = 65536


class _Pair:
    """One proxied connection: the client's socket and the upstream socket."""

    def __init__(self, client: socket.socket, upstream: socket.socket, blackholed: bool, serial: int) -> None:
        self.serial = serial  # the how-manyth connection of its proxy (1, 2, ...)
        self.client = client
        self.upstream = upstream
        self.blackholed = blackholed
        self.closed = False


class Proxy:
    """A TCP proxy on ``127.0.0.1:<port>`` in front of ``127.0.0.1:<target>``.

    Args:
        target: the upstream port.

    Attributes:
        port: the proxy's own port. accepted: connections accepted so far (``int``).
    """

    def __init__(self, target: int) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(_TICK)
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: List[_Pair] = []
        self._threads: List[threading.Thread] = []
        self._closed = False
        self._blackhole_new = False
        self._delay = 0.0
        # pattern, rst, forward, [times left], first connection serial the rule applies to
        self._rules: List[Tuple[bytes, bool, bool, List[int], int]] = []
        self.accepted = 0
        self.dropped = 0
        self._start(self._accept_loop, "accept")

    # ------------------------------------------------------------------ commands

    def drop_all(self, rst: bool = True) -> int:
        """Close every open connection (RST when ``rst``, else a clean close); return how many."""
        with self._lock:
            pairs = [p for p in self._pairs if not p.closed]
            self._pairs = []
        for pair in pairs:
            self._close_pair(pair, rst)
        with self._lock:
            self.dropped += len(pairs)
        return len(pairs)

    def blackhole(self, existing: bool = True, new: bool = False) -> None:
        """Pass nothing on the open connections (``existing``) and/or on later ones (``new``);
        the sockets stay open."""
        with self._lock:
            if existing:
                for pair in self._pairs:
                    pair.blackholed = True
            self._blackhole_new = new

    def set_delay(self, seconds: float) -> None:
        """Wait ``seconds`` before forwarding each piece, both ways."""
        self._delay = seconds

    def drop_when(
        self,
        pattern: bytes,
        *,
        times: int = 1,
        rst: bool = True,
        forward: bool = False,
        new_only: bool = False,
    ) -> None:
        """Drop every connection when bytes from upstream contain ``pattern``, ``times`` times.

        Args:
            pattern: bytes to look for in one piece read from the bridge.
            times: how many drops this rule makes before it retires.
            rst: reset instead of a clean close.
            forward: forward the matching piece first (else it is lost with the connection).
            new_only: look only at connections accepted after this call.
        """
        with self._lock:
            self._rules.append((pattern, rst, forward, [times], self.accepted + 1 if new_only else 0))

    def rules_left(self) -> int:
        """Drops the :meth:`drop_when` rules still have to make."""
        with self._lock:
            return sum(rule[3][0] for rule in self._rules)

    def close(self) -> None:
        """Stop accepting, close every connection, and wait for every thread (bounded)."""
        self._closed = True
        self.drop_all(rst=True)
        try:
            self._listener.close()
        except OSError:
            pass
        deadline = time.monotonic() + 5.0
        for thread in list(self._threads):
            thread.join(max(0.0, deadline - time.monotonic()))

    # ------------------------------------------------------------------ internals

    def _start(self, target: Any, name: str, *args: Any) -> None:
        thread = threading.Thread(
            target=target, args=args, name=f"test-proxy-{self.port}-{name}", daemon=True
        )
        self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=2.0)
            except OSError:
                self._close_socket(client, rst=True)  # nothing listens: the host sees a reset
                continue
            with self._lock:
                self.accepted += 1
                pair = _Pair(client, upstream, self._blackhole_new, self.accepted)
                if self._closed:
                    self._close_pair(pair, True)
                    return
                self._pairs.append(pair)
            self._start(self._pump, "up", pair, client, upstream, False)
            self._start(self._pump, "down", pair, upstream, client, True)

    def _match(self, pair: _Pair, data: bytes) -> Optional[Tuple[bool, bool]]:
        with self._lock:
            if pair.closed:
                return None
            for pattern, rst, forward, left, first in self._rules:
                if left[0] > 0 and pair.serial >= first and pattern in data:
                    left[0] -= 1
                    return rst, forward
        return None

    def _pump(self, pair: _Pair, source: socket.socket, sink: socket.socket, from_bridge: bool) -> None:
        try:
            while not pair.closed and not self._closed:
                ready, _, _ = select.select([source], [], [], _TICK)
                if not ready:
                    continue
                data = source.recv(_PIECE)
                if not data:
                    break
                if pair.blackholed:
                    continue  # held: read and never passed on
                rule = self._match(pair, data) if from_bridge else None
                if rule is not None and not rule[1]:
                    self.drop_all(rst=rule[0])
                    return
                if self._delay:
                    time.sleep(self._delay)
                sink.sendall(data)
                if rule is not None:
                    self.drop_all(rst=rule[0])
                    return
        except OSError:
            pass
        if not pair.blackholed:
            self._close_pair(pair, rst=False)

    @staticmethod
    def _close_socket(sock: socket.socket, rst: bool) -> None:
        try:
            if rst:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            else:
                sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            sock.close()
        except OSError:
            pass

    def _close_pair(self, pair: _Pair, rst: bool) -> None:
        if pair.closed:
            return
        pair.closed = True
        self._close_socket(pair.client, rst)
        self._close_socket(pair.upstream, rst)


class ProxySandbox:
    """A sandbox whose ``expose`` puts a :class:`Proxy` in front of the port; everything else
    is the wrapped sandbox's. Close it (the fixture does) to stop every proxy."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self._lock = threading.Lock()
        self.proxies: Dict[int, Proxy] = {}

    @property
    def id(self) -> str:
        return self.inner.id  # type: ignore[no-any-return]

    @property
    def state_root(self) -> str:
        return self.inner.state_root  # type: ignore[no-any-return]

    @property
    def workdir(self) -> str:
        return self.inner.workdir  # type: ignore[no-any-return]

    def exec(self, *args: Any, **kw: Any) -> Any:
        return self.inner.exec(*args, **kw)

    def spawn(self, *args: Any, **kw: Any) -> Any:
        return self.inner.spawn(*args, **kw)

    def read_file(self, path: str) -> bytes:
        return self.inner.read_file(path)  # type: ignore[no-any-return]

    def write_file(self, path: str, data: bytes, *, mode: int = 0o600) -> None:
        self.inner.write_file(path, data, mode=mode)

    def expose(self, port: int) -> bc.Endpoint:
        with self._lock:
            proxy = self.proxies.get(port)
            if proxy is None:
                proxy = self.proxies[port] = Proxy(port)
        return bc.Endpoint(f"ws://127.0.0.1:{proxy.port}/")

    # ------------------------------------------------------------------ commands to every proxy

    def all(self) -> List[Proxy]:
        """Every proxy made so far."""
        with self._lock:
            return list(self.proxies.values())

    def current(self) -> Proxy:
        """The proxy made last (in front of the bridge that answers now)."""
        with self._lock:
            return list(self.proxies.values())[-1]

    def drop_all(self, rst: bool = True) -> int:
        """Drop every connection of every proxy; return how many."""
        return sum(p.drop_all(rst) for p in self.all())

    @property
    def accepted(self) -> int:
        """Connections accepted by every proxy together."""
        return sum(p.accepted for p in self.all())

    def close(self) -> None:
        for proxy in self.all():
            proxy.close()

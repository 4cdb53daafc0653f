"""The bridge's WebSocket server: the listening socket and its accept loop, the token check
before the upgrade, each connection's life from accept to close, and the shutdown (the
bridge exits when unused, see :class:`~bridge_client.bridge.idle.IdleWatcher`).

Built on websockets' sync server: one thread per connection reads frames and answers the
quick RPCs itself; each ``ReadTurn`` gets its own thread only once a send must wait; every
send goes through the connection's send lock. A bad frame is answered alone and never ends
the connection or the bridge.

The parts, from the top down: this module (sockets, handshake, connections' life);
:mod:`~bridge_client.bridge.listener` (the listening socket, the connection gate, send
timeouts); :mod:`~bridge_client.bridge.connection` (one connection: reading frames, sending);
:mod:`~bridge_client.bridge.read_stream` (the ReadTurn sender: Chunks, Acks, back-pressure);
:mod:`~bridge_client.bridge.dispatch` (decoding a request, calling the turn manager, typed
failures); :mod:`~bridge_client.bridge.limits` (the bounds). Their public names used by the
bridge program, tests and docs are re-exported here.
"""
from __future__ import annotations

import hmac
import http
import itertools
import json
import logging
import socket
import threading
import time
import urllib.parse
from typing import Any, Callable, Dict, Optional, Set


from ..redacted import Redacted
from ..wire.parts import PROTOCOL_VERSION
from ..wire.upgrade import redact_library_loggers
from .connection import Connection
from .dispatch import Dispatcher, rpc_handlers
from .idle import IdleWatcher
from .limits import (
    HANDSHAKE_TIMEOUT,
    MAX_FRAME_BYTES,
    MAX_HANDSHAKES,
    MAX_STREAMS,
    MAX_STREAMS_PER_CONNECTION,
    SEND_TIMEOUT,
    SILENCE_TIMEOUT,
    Limits,
    default_limits,
    default_max_connections,
    streams_per_connection,
    task_limit,
)
from .listener import (
    ACCEPT_BACKOFF,
    ConnectionGate,
    ListeningSocket,
    RateLimitedWarning,
    abort,
    listening_socket,
    refuse,
)
from .read_stream import ReadStream
from .turns import TurnManager
from .ws_connection import WsConnection

__all__ = [
    "BridgeServer",
    "IdleWatcher",
    "MAX_FRAME_BYTES",
    "SILENCE_TIMEOUT",
    "HEALTHZ_PATH",
    "HANDSHAKE_TIMEOUT",
    "MAX_HANDSHAKES",
    "MAX_STREAMS",
    "MAX_STREAMS_PER_CONNECTION",
    "SEND_TIMEOUT",
    "Limits",
    "default_limits",
    "default_max_connections",
    "task_limit",
    "streams_per_connection",
]

log = logging.getLogger("bridge_client.bridge.server")
redact_library_loggers()  # websockets logs the upgrade's Authorization header at DEBUG

HEALTHZ_PATH = "/healthz"

_ReadStream = ReadStream  # the name tests/bridge/test_hot_path_streams.py imports from here

_CLOSE_TIMEOUT = 2.0  # seconds a closing handshake may take before the socket is closed


class BridgeServer:
    """The bridge's WebSocket server.

    Args:
        manager: sessions and turns.
        token: the bearer token every upgrade must carry (a missing or wrong one gets HTTP 401);
            never logged.
        hello: the ``Hello`` answer (agent id, bridge id, instance id).
        bind: the address to listen on (port 0: the system picks).
        idle: the idle watcher told about connections, or ``None``.
        max_size: the largest frame, in bytes.
        silence_timeout: seconds without a frame before a connection is closed.
        max_connections: TCP connections at most at once (``None``: from the open-files
            limit, :func:`default_max_connections`); beyond, 503.
        max_handshakes: of them, at most this many still in their opening handshake; a new
            connection beyond drops the oldest unfinished one.
        handshake_timeout: seconds a connection has to send its whole HTTP request.
        max_streams: ReadTurn streams at once in all; beyond, ``Overloaded`` (which the host resends).
        max_streams_per_connection: of them, at most this many on one connection (``None``:
            :func:`streams_per_connection`).
        send_timeout: seconds a frame may take to go into a socket before its connection is
            dropped (a peer that does not read cannot hold the bridge).
    """

    def __init__(
        self,
        manager: TurnManager,
        *,
        token: Redacted,
        hello: Dict[str, Any],
        bind: str = "127.0.0.1",
        idle: Optional[IdleWatcher] = None,
        max_size: int = MAX_FRAME_BYTES,
        silence_timeout: float = SILENCE_TIMEOUT,
        max_connections: Optional[int] = None,
        max_handshakes: int = MAX_HANDSHAKES,
        handshake_timeout: float = HANDSHAKE_TIMEOUT,
        max_streams: int = MAX_STREAMS,
        max_streams_per_connection: Optional[int] = None,
        send_timeout: float = SEND_TIMEOUT,
    ) -> None:
        self.manager = manager
        self._token = token
        self.hello = dict(hello)
        self.bind = bind
        self._idle = idle
        self._max_size = max_size
        self.silence_timeout = silence_timeout
        self.handshake_timeout = handshake_timeout
        self.gate = ConnectionGate(
            max_connections if max_connections is not None else default_max_connections(), max_handshakes
        )
        self.max_streams = max(1, max_streams)
        self.max_streams_per_connection = max(
            1,
            max_streams_per_connection
            if max_streams_per_connection is not None
            else streams_per_connection(self.max_streams),
        )
        self.send_timeout = send_timeout
        self._numbers = itertools.count(1)
        self._listening: Optional[ListeningSocket] = None
        self._lock = threading.Lock()
        self._live: Dict[WsConnection, Connection] = {}  # open connections, guarded by _lock
        self._streams = 0  # ReadTurn streams in all, guarded by _lock
        self._handlers: Set[threading.Thread] = set()  # connection threads, guarded by _lock
        self._stopping = threading.Event()
        self._accepting = threading.Event()  # serve_forever's loop is running
        self._accept_ended = threading.Event()
        self._thread_warning = RateLimitedWarning("cannot start a connection's thread; refused it (503)")
        # /healthz names who answers (no secret: the id and instance are in listening.json), so
        # that a reader of a stale listening file tells this bridge from the one it names.
        self._healthz_body = json.dumps(
            {
                "protocol": PROTOCOL_VERSION,
                "bridgeId": self.hello.get("bridgeId"),
                "instance": self.hello.get("instance"),
            }
        )
        # The quick RPCs, by tag (the dispatcher holds this same dict).
        self.handlers: Dict[str, Callable[..., Any]] = rpc_handlers(manager, lambda: self.hello)
        self.dispatcher = Dispatcher(self.handlers)

    def start(self) -> int:
        """Bind and listen.

        Returns:
            The port the system picked.

        Raises:
            OSError: the address cannot be bound.
        """
        self._listening = listening_socket(self.bind, self.gate, self.send_timeout)
        return int(self._listening.getsockname()[1])

    def serve_forever(self) -> None:
        """Accept connections until :meth:`shutdown` (called from another thread).

        Our own loop instead of websockets' ``serve_forever``: a connection's thread that
        cannot be started (the task limit) refuses that connection with 503 and the loop goes
        on, where websockets' loop would end; and the threads are daemons, so a peer
        that never reads cannot keep the process from exiting."""
        assert self._listening is not None, "call start() first"
        self._accepting.set()
        try:
            while not self._stopping.is_set():
                try:
                    sock, address = self._listening.accept()
                except OSError:
                    break  # closed by shutdown() (or an error that is not a shortage)
                thread = threading.Thread(
                    target=self._run_handler,
                    args=(sock, address),
                    name="bridge-connection",
                    daemon=True,
                )
                with self._lock:
                    self._handlers.add(thread)
                try:
                    thread.start()
                except RuntimeError as exc:  # "can't start new thread"
                    with self._lock:
                        self._handlers.discard(thread)
                    self._thread_warning(str(exc))
                    self.gate.release(sock)
                    refuse(sock)
                    time.sleep(ACCEPT_BACKOFF)
        finally:
            self._accept_ended.set()

    def _run_handler(self, sock: socket.socket, address: Any) -> None:
        """A connection's thread: the upgrade, then serving it, then the socket's close; its
        slot in the gate is given back at the end, whatever happened."""
        ws: Optional[WsConnection] = None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
            ws = WsConnection(sock, address, self._max_size, _CLOSE_TIMEOUT)
            if ws.handshake(self._process_request, self.handshake_timeout):
                try:
                    self._handle(ws)
                finally:
                    ws.close()  # a no-op when the connection was closed already
        except Exception:  # a failure here ends this connection only
            log.exception("a connection's handler failed")
        finally:
            if ws is not None:
                ws.close_socket()
            else:
                try:
                    sock.close()
                except OSError:
                    pass
            self.gate.release(sock)
            with self._lock:
                self._handlers.discard(threading.current_thread())

    def shutdown(self, timeout: float = _CLOSE_TIMEOUT + 2.0) -> None:
        """Stop listening, close every connection (1001) and wait for their threads, in at most
        about ``timeout`` seconds in all, whatever the peers do: a connection whose peer
        does not read (a send blocked in its socket) or does not answer the close is shut down
        at the socket. Idempotent; call it from a thread that is not a connection's."""
        if self._listening is None:
            return
        deadline = time.monotonic() + timeout
        self._stopping.set()  # hand-shaking connections are answered 503 from here on
        self._close_live(deadline)
        if self._listening is not None:
            self._listening.close()  # no new connection from here on (accept() then raises)...
        self.gate.drop_pending()  # ...and none left waiting out its handshake timeout
        if self._accepting.is_set():
            self._accept_ended.wait(max(0.0, min(1.0, deadline - time.monotonic())))
        self._close_live(deadline)  # what opened meanwhile
        with self._lock:
            handlers = list(self._handlers)
        for thread in handlers:
            thread.join(max(0.0, deadline - time.monotonic()))
        left = [t for t in handlers if t.is_alive()]
        if left:
            log.warning("shutdown: %d connection thread(s) still running; leaving them", len(left))

    def _close_live(self, deadline: float) -> None:
        """Close every open connection with 1001, in parallel; abort at once those whose send
        is blocked (their close would wait for it), and any that has not closed by the
        close timeout or ``deadline``."""
        with self._lock:
            live = list(self._live.items())
        closers = []
        for ws, conn in live:
            if conn.send_blocked():
                log.warning("connection %d: its peer does not read; dropping it", conn.number)
                abort(ws.socket)
            thread = threading.Thread(target=_close_quietly, args=(ws,), daemon=True)
            try:
                thread.start()
            except RuntimeError:
                abort(ws.socket)  # no thread to close it politely
                continue
            closers.append((ws, thread))
        end = min(deadline, time.monotonic() + _CLOSE_TIMEOUT + 0.5)
        for _, thread in closers:
            thread.join(max(0.0, end - time.monotonic()))
        for ws, thread in closers:
            if thread.is_alive():
                abort(ws.socket)
        end = min(deadline, time.monotonic() + 0.5)
        for _, thread in closers:
            thread.join(max(0.0, end - time.monotonic()))

    # ------------------------------------------------------------------ stream bounds

    def take_stream(self) -> bool:
        """Count a new ReadTurn stream in the total; False when at ``max_streams``."""
        with self._lock:
            if self._streams >= self.max_streams:
                return False
            self._streams += 1
            return True

    def give_stream(self) -> None:
        """A stream counted by :meth:`take_stream` ended."""
        with self._lock:
            self._streams -= 1

    # ------------------------------------------------------------------ HTTP, before the upgrade

    def _process_request(self, connection: WsConnection, request: Any) -> Any:
        self.gate.handshake_done(connection.socket)
        path = urllib.parse.urlsplit(request.path).path
        if path == HEALTHZ_PATH:
            response = connection.respond(http.HTTPStatus.OK, self._healthz_body)
            del response.headers["Content-Type"]
            response.headers["Content-Type"] = "application/json"
            return response
        if not self._authorized(request.headers.get_all("Authorization")):
            log.warning("refused an upgrade without the right bearer token (401)")
            response = connection.respond(http.HTTPStatus.UNAUTHORIZED, "missing or wrong bearer token\n")
            response.headers["WWW-Authenticate"] = "Bearer"
            return response
        if self._stopping.is_set():  # no new connection for a bridge that is going away
            return connection.respond(http.HTTPStatus.SERVICE_UNAVAILABLE, "the bridge is shutting down\n")
        return None  # go on with the upgrade

    def _authorized(self, values: Any) -> bool:
        """Exactly one ``Authorization: Bearer <token>``, compared in constant time.

        The scheme must be spelled ``Bearer`` exactly, as docs/protocol.md writes it (RFC 7235
        would allow any case; our hosts never send another)."""
        if len(values) != 1:
            return False
        scheme, _, credentials = values[0].strip().partition(" ")
        if scheme != "Bearer":
            return False
        given = credentials.strip().encode("utf-8", "surrogateescape")
        return hmac.compare_digest(given, self._token.reveal().encode("utf-8"))

    # ------------------------------------------------------------------ connections

    def _handle(self, ws: WsConnection) -> None:
        number = next(self._numbers)
        # No INFO line per connection: a line costs the GIL, its formatting and a write to
        # bridge.log, and a host opening many sessions pays it for each; the turns' lines
        # (with their session ids) and the warnings say what happened.
        debug = log.isEnabledFor(logging.DEBUG)
        peer = _peer(ws) if debug else ""
        if debug:
            log.debug("connection %d opened from %s", number, peer)
        conn = Connection(self, ws, number)
        with self._lock:
            self._live[ws] = conn
        if self._idle is not None:
            self._idle.connection_opened()
        try:
            if self._stopping.is_set():
                _close_quietly(ws)
            conn.serve()
        finally:
            with self._lock:
                self._live.pop(ws, None)
            if self._idle is not None:
                self._idle.connection_closed()
            if debug:
                log.debug("connection %d from %s closed", number, peer)


def _close_quietly(ws: WsConnection) -> None:
    try:
        ws.close(1001, "the bridge is shutting down")
    except Exception:
        pass  # closed was the goal


def _peer(ws: WsConnection) -> str:
    try:
        host, port = ws.remote_address[:2]
        return f"{host}:{port}"
    except Exception:
        return "?"

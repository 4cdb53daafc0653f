"""The bridge's WebSocket server: the token check before the upgrade, the RPC dispatch
over Effect RPC's envelope (:doc:`protocol`), ReadTurn streams with acks, and the idle watcher
(the bridge exits when unused).

Built on websockets' sync server: one thread per connection reads frames and answers the
quick RPCs itself; each ``ReadTurn`` gets its own thread; every send goes through the
connection's send lock. A bad frame is answered alone and never ends the connection or the
bridge.
"""
from __future__ import annotations

import collections
import errno
import fcntl
import hmac
import http
import inspect
import itertools
import json
import logging
import os
import resource
import select
import socket
import struct
import termios
import threading
import time
import urllib.parse
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Set, Tuple

from websockets.exceptions import ConnectionClosed
from websockets.frames import Frame, Opcode
from websockets.sync.server import Server, ServerConnection, serve

from ..errors import BadRequest, Overloaded, RpcError
from ..redacted import Redacted
from ..wire.frames import (
    Ack,
    Defect,
    Die,
    Eof,
    Exit,
    Fail,
    Failure,
    FrameError,
    Interrupt,
    Interrupted,
    Ping,
    Pong,
    Request,
    RequestId,
    Success,
    encode,
    encode_chunk_raw,
    host_message,
    parse_frame,
)
from ..wire.parts import PROTOCOL_VERSION
from ..wire.rpcs import CATALOGUE
from ..wire.upgrade import redact_library_loggers
from .store import json_text
from .turns import Turn, TurnManager

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
redact_library_loggers()  # websockets logs the upgrade's Authorization header at DEBUG (C17)

MAX_FRAME_BYTES = 16 * 1024 * 1024
"""Largest frame accepted, in bytes; a larger one closes its connection with 1009."""

SILENCE_TIMEOUT = 120.0
"""Seconds without any frame after which a connection counts as dead and is closed. Hosts ping
every 5 s, so this only catches half-open TCP, which would otherwise hold off the idle exit."""

HEALTHZ_PATH = "/healthz"

HANDSHAKE_TIMEOUT = 5.0
"""Seconds a new TCP connection has to send its whole HTTP request (upgrade or ``/healthz``);
then it is closed (a slowloris peer holds a slot this long at most)."""

MAX_HANDSHAKES = 64
"""TCP connections at most still in their opening handshake; a new one beyond this drops the
oldest of them (a half-sent request cannot lock newcomers out)."""

MAX_STREAMS = 256
"""ReadTurn streams at once in the whole bridge, at most (each has a thread); beyond, the
request is answered with the retryable ``Overloaded``."""

MAX_STREAMS_PER_CONNECTION = 32
"""ReadTurn streams at once on one connection, at most (a host reads one per turn)."""

SEND_TIMEOUT = 30.0
"""Seconds one frame may take to go into a connection's socket; a peer that reads nothing
for that long has its connection dropped (its send is not waited for)."""

_TASKS_SPARE = 12  # threads kept for the store, the watchers, the shutdown and the driver
_THREADS_PER_CONNECTION = 2  # websockets' sync server: the handler and its frame reader
_FDS_PER_CONNECTION = 4  # the socket and websockets' own per-connection files, with some slack
_FDS_SPARE = 64  # files kept for the store, the log, the driver's commands
_MAX_CONNECTIONS_CAP = 512
_ACCEPT_BACKOFF = 0.1  # seconds of pause after accept() failed for want of a file or memory
_ACCEPT_POLL_MS = 200  # how often a waiting accept looks whether the server was shut down
_RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_REFUSAL = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
_WARN_EVERY = 5.0  # seconds between two warnings about refused connections or accept errors


def default_max_connections() -> int:
    """The default bound on concurrent TCP connections: what the open-files limit
    (``RLIMIT_NOFILE``, soft) leaves room for, from 8 to 512."""
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):  # pragma: no cover
        return _MAX_CONNECTIONS_CAP
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return _MAX_CONNECTIONS_CAP
    return max(8, min(_MAX_CONNECTIONS_CAP, (soft - _FDS_SPARE) // _FDS_PER_CONNECTION))

class Limits(NamedTuple):
    """The bridge's bounds on work: ``connections`` (TCP), ``streams`` (ReadTurns in all)
    and ``turns`` (running at once)."""

    connections: int
    streams: int
    turns: int


def task_limit() -> Optional[int]:
    """The number of tasks (threads and processes) this bridge may have at most, when it is
    limited: the cgroup's ``pids.max`` (a container's ``--pids-limit``) or, for a user other
    than root, ``RLIMIT_NPROC`` (soft). ``None`` when neither limits it."""
    limits: List[int] = []
    try:
        nproc, _ = resource.getrlimit(resource.RLIMIT_NPROC)
        if os.geteuid() != 0 and nproc != resource.RLIM_INFINITY and nproc > 0:
            limits.append(int(nproc))
    except (OSError, ValueError, AttributeError):  # pragma: no cover
        pass
    pids = _cgroup_pids_max()
    if pids is not None:
        limits.append(pids)
    return min(limits) if limits else None


def _cgroup_pids_max() -> Optional[int]:
    """``pids.max`` of this process's cgroup (v1 ``pids`` controller or v2), or ``None``."""
    try:
        with open("/proc/self/cgroup", encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "pids":
            candidate = os.path.join("/sys/fs/cgroup/pids", path.lstrip("/"), "pids.max")
        elif controllers == "":
            candidate = os.path.join("/sys/fs/cgroup", path.lstrip("/"), "pids.max")
        else:
            continue
        try:
            with open(candidate, encoding="ascii") as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) > 0:
            return int(text)
    return None


def default_limits() -> Limits:
    """The default bounds: from the open-files limit (``RLIMIT_NOFILE``) for connections, and,
    when the task limit (:func:`task_limit`) is finite, shared out of what it leaves so that no
    honest load runs the bridge out of threads: a sixteenth each to streams and turns, the rest
    to connections (two threads each). With 128 tasks: 51 connections, 7 streams, 7 running
    turns; requests beyond get ``Overloaded`` and are resent."""
    connections = default_max_connections()
    streams, turns = MAX_STREAMS, 256
    tasks = task_limit()
    if tasks is not None:
        budget = max(8, tasks - _TASKS_SPARE)
        share = max(2, budget // 16)
        streams, turns = min(streams, share), min(turns, share)
        connections = max(4, min(connections, (budget - streams - turns) // _THREADS_PER_CONNECTION))
    return Limits(connections, streams, turns)


def streams_per_connection(max_streams: int) -> int:
    """The default bound of streams on one connection: a quarter of ``max_streams`` (so that
    one connection cannot take them all), from 1 to :data:`MAX_STREAMS_PER_CONNECTION`."""
    return max(1, min(MAX_STREAMS_PER_CONNECTION, max_streams // 4))


def _set_send_timeout(sock: socket.socket, seconds: float) -> None:
    """Bound every send on ``sock`` (``SO_SNDTIMEO``): a blocked ``send`` fails after
    ``seconds``, and websockets then drops the connection instead of holding its lock."""
    whole = int(seconds)
    try:
        sock.setsockopt(
            socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", whole, int((seconds - whole) * 1e6))
        )
    except (OSError, struct.error):  # pragma: no cover - not on this platform: shutdown still aborts
        pass


def _abort(sock: Any) -> None:
    """Shut ``sock`` down both ways without any lock: a send blocked in it returns at once."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except (OSError, AttributeError):
        pass


INLINE_BYTES = 64 * 1024
"""Largest Chunk (characters of JSON) that a thread other than the stream's own sends itself."""

_OUTQ = getattr(termios, "TIOCOUTQ", None)  # SIOCOUTQ on Linux: bytes not yet sent


def _room(fd: int, size: int) -> bool:
    """True when ``size`` more bytes fit in the socket's send queue without a wait, as far as
    can be told cheaply (the bytes queued plus ``size`` stay within :data:`INLINE_BYTES`)."""
    if _OUTQ is None or fd < 0:
        return True  # pragma: no cover - no way to tell: the send timeout still bounds it
    try:
        queued = struct.unpack("i", fcntl.ioctl(fd, _OUTQ, b"\0\0\0\0"))[0]
    except OSError:
        return False
    return bool(queued + size <= INLINE_BYTES)


class _FastAckConnection(ServerConnection):
    """websockets' server connection, with Acks handled in the thread that reads the socket
    (``ack_hook``, set by :class:`_Connection`): a stream's next Chunk goes out without waking
    the connection's own thread. Every other frame goes the usual way."""

    ack_hook: Optional[Callable[[bytes], bool]] = None

    def process_event(self, event: Any) -> None:
        hook = self.ack_hook
        if (
            hook is not None
            and type(event) is Frame
            and event.fin
            and event.opcode is Opcode.TEXT
            and len(event.data) < 256
            and bytes(event.data[:13]) == b'{"_tag":"Ack"'
            and hook(bytes(event.data))
        ):
            return
        super().process_event(event)


_SERVE_PARAMETERS = frozenset(inspect.signature(serve).parameters)
_STREAM_JOIN_TIMEOUT = 2.0
_CLOSE_TIMEOUT = 2.0  # seconds a closing handshake may take before the socket is closed


class IdleWatcher:
    """Calls ``on_idle`` once, after ``idle_timeout`` seconds with no connection open and no
    turn running. Its thread waits on a condition that every change notifies; it never
    polls.

    Args:
        idle_timeout: in seconds.
        on_idle: called from the watcher's thread; must not block for long.

    Call :meth:`start` once the bridge listens (the idle time counts from then).
    """

    def __init__(self, idle_timeout: float, on_idle: Callable[[], None]) -> None:
        self.idle_timeout = idle_timeout
        self._on_idle = on_idle
        self._cond = threading.Condition()
        self._connections = 0
        self._running = 0
        self._since = time.monotonic()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="bridge-idle", daemon=True)

    def start(self) -> None:
        """Start counting idle time from now."""
        with self._cond:
            self._since = time.monotonic()
        self._thread.start()

    def _changed(self) -> None:
        # Caller holds the condition. Idle time restarts at every change.
        self._since = time.monotonic()
        self._cond.notify_all()

    def connection_opened(self) -> None:
        """A WebSocket connection opened."""
        with self._cond:
            self._connections += 1
            self._changed()

    def connection_closed(self) -> None:
        """A WebSocket connection closed."""
        with self._cond:
            self._connections -= 1
            self._changed()

    def set_running(self, count: int) -> None:
        """The number of running turns is now ``count``."""
        with self._cond:
            self._running = count
            self._changed()

    def stop(self) -> None:
        """Stop watching (idempotent); ``on_idle`` is not called after this."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def _run(self) -> None:
        with self._cond:
            while not self._stopped:
                if self._connections or self._running:
                    self._cond.wait()
                    continue
                remaining = self._since + self.idle_timeout - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            if self._stopped:
                return
        log.info("idle for %s s with no connection and no running turn (B06)", self.idle_timeout)
        self._on_idle()


class _RateLimitedWarning:
    """A warning logged at most once per ``_WARN_EVERY`` seconds, with how many were held back."""

    def __init__(self, message: str) -> None:
        self._message = message
        self._lock = threading.Lock()
        self._last = float("-inf")
        self._held = 0

    def __call__(self, detail: str) -> None:
        with self._lock:
            now = time.monotonic()
            if now - self._last < _WARN_EVERY:
                self._held += 1
                return
            held, self._held, self._last = self._held, 0, now
        log.warning("%s: %s%s", self._message, detail, f" ({held} more like it)" if held else "")


class _ConnectionGate:
    """Bounds the bridge's TCP connections (B08): at most ``max_connections`` at once (each
    costs two threads and a few files), of which at most ``max_handshakes`` still in their
    opening handshake. A connection beyond ``max_handshakes`` drops the oldest unfinished
    handshake (shut down, so its thread ends at once); one beyond ``max_connections`` when
    every slot has finished its handshake is refused with HTTP 503.

    Thread-safe; sockets are tracked from :meth:`admit` (accept) to :meth:`release` (the end
    of the connection's thread).
    """

    def __init__(self, max_connections: int, max_handshakes: int) -> None:
        self.max_connections = max_connections
        self.max_handshakes = max(1, min(max_handshakes, max_connections))
        self._lock = threading.Lock()
        self._pending: "collections.OrderedDict[socket.socket, None]" = collections.OrderedDict()
        self._counted: Set[socket.socket] = set()  # admitted and not dropped, guarded by _lock
        self._closed = False  # drop_pending() ran: nothing is admitted any more
        self._warn = _RateLimitedWarning("connections refused or dropped (B08 limits)")

    def admit(self, sock: socket.socket) -> bool:
        """A connection was accepted: take a slot (True), or refuse it (False)."""
        dropped: List[socket.socket] = []
        with self._lock:
            while self._pending and (
                len(self._pending) >= self.max_handshakes or len(self._counted) >= self.max_connections
            ):
                oldest, _ = self._pending.popitem(last=False)
                self._counted.discard(oldest)
                dropped.append(oldest)
            admitted = not self._closed and len(self._counted) < self.max_connections
            if admitted:
                self._counted.add(sock)
                self._pending[sock] = None
        for old in dropped:
            try:
                old.shutdown(socket.SHUT_RDWR)  # its handshake ends at once; its thread closes it
            except OSError:
                pass
        if dropped:
            self._warn(f"dropped {len(dropped)} unfinished handshake(s) for a new connection")
        if not admitted and not self._closed:
            self._warn(f"refused a connection: {self.max_connections} open already")
        return admitted

    def handshake_done(self, sock: Any) -> None:
        """The connection's HTTP request arrived whole."""
        with self._lock:
            self._pending.pop(sock, None)

    def release(self, sock: socket.socket) -> None:
        """The connection's thread ended (its socket is closed)."""
        with self._lock:
            self._pending.pop(sock, None)
            self._counted.discard(sock)

    def drop_pending(self) -> None:
        """Shut down every connection still in its handshake (the server is stopping: none of
        them would be served, and websockets' shutdown would wait for each to time out).
        From then on nothing is admitted (an ``accept()`` under way when the listening socket
        closed is refused)."""
        with self._lock:
            self._closed = True
            pending = list(self._pending)
        for sock in pending:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def counts(self) -> Tuple[int, int]:
        """``(connections, of them in their handshake)`` now."""
        with self._lock:
            return len(self._counted), len(self._pending)


def _refuse(sock: socket.socket) -> None:
    """Answer 503 if the peer's buffer takes it at once, and close."""
    try:
        sock.setblocking(False)
        sock.send(_REFUSAL)
    except OSError:
        pass
    finally:
        sock.close()


class _ListeningSocket(socket.socket):
    """The bridge's listening socket (B08). websockets' ``serve_forever`` stops for good on any
    ``OSError`` from ``accept()``; this ``accept`` rides out a shortage of files or memory
    (EMFILE, ENFILE, ENOBUFS, ENOMEM: a pause, then again), refuses connections beyond the
    :class:`_ConnectionGate`'s limits without starting a thread for them, and raises only
    once the socket is closed (the server's shutdown).

    The socket is non-blocking; ``accept`` waits with ``poll`` (no file of its own, no
    ``FD_SETSIZE`` limit), looking every ``_ACCEPT_POLL_MS`` whether it was closed.
    """

    gate: _ConnectionGate
    _accept_warning: _RateLimitedWarning
    send_timeout: float

    def accept(self) -> Tuple[socket.socket, Any]:
        """Wait for a connection the gate admits.

        Returns:
            ``(socket, address)``; the socket is blocking.

        Raises:
            OSError: the listening socket is closed (or another error than a shortage).
        """
        poller = select.poll()
        while True:
            fd = self.fileno()
            if fd < 0:
                raise OSError(errno.EBADF, "the listening socket is closed")
            poller.register(fd, select.POLLIN)
            try:
                ready = poller.poll(_ACCEPT_POLL_MS)
            finally:
                try:
                    poller.unregister(fd)
                except (KeyError, ValueError, OSError):
                    pass
            if not ready:
                continue
            try:
                conn_fd, address = self._accept()  # type: ignore[attr-defined]
            except (BlockingIOError, InterruptedError):
                continue
            except OSError as exc:
                if exc.errno not in _RESOURCE_ERRNOS:
                    raise
                self._accept_warning(f"{exc.strerror or exc}; pausing {_ACCEPT_BACKOFF} s")
                time.sleep(_ACCEPT_BACKOFF)
                continue
            sock = socket.socket(self.family, self.type, self.proto, fileno=conn_fd)
            sock.setblocking(True)
            _set_send_timeout(sock, self.send_timeout)
            if self.gate.admit(sock):
                return sock, address
            _refuse(sock)


def _listening_socket(
    bind: str, gate: _ConnectionGate, send_timeout: float = SEND_TIMEOUT
) -> _ListeningSocket:
    """Bind ``bind`` on a port the system picks, and listen.

    Raises:
        OSError: the address cannot be bound.
    """
    plain = socket.create_server((bind, 0), backlog=128)
    listening = _ListeningSocket(fileno=plain.detach())
    listening.setblocking(False)
    listening.gate = gate
    listening.send_timeout = send_timeout
    listening._accept_warning = _RateLimitedWarning("accept() failed")
    return listening


def _key(request_id: RequestId) -> Tuple[type, RequestId]:
    # Ids keep their JSON type: 1 and "1" are different requests.
    return (type(request_id), request_id)


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
        self.gate = _ConnectionGate(
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
        self._server: Optional[Server] = None
        self._listening: Optional[_ListeningSocket] = None
        self._lock = threading.Lock()
        self._live: Dict[ServerConnection, "_Connection"] = {}  # open connections, guarded by _lock
        self._streams = 0  # ReadTurn streams in all, guarded by _lock
        self._handlers: Set[threading.Thread] = set()  # connection threads, guarded by _lock
        self._stopping = threading.Event()
        self._accepting = threading.Event()  # serve_forever's loop is running
        self._accept_ended = threading.Event()
        self._thread_warning = _RateLimitedWarning("cannot start a connection's thread; refused it (503)")
        # /healthz names who answers (no secret: the id and instance are in listening.json), so
        # that a reader of a stale listening file tells this bridge from the one it names.
        self._healthz_body = json.dumps(
            {
                "protocol": PROTOCOL_VERSION,
                "bridgeId": self.hello.get("bridgeId"),
                "instance": self.hello.get("instance"),
            }
        )
        self.handlers: Dict[str, Callable[..., Any]] = {
            "Hello": lambda: self.hello,
            "OpenSession": manager.open_session,
            "StartTurn": manager.start_turn,
            "CancelTurn": manager.cancel_turn,
            "CloseSession": manager.close_session,
            "AnswerApproval": manager.answer_approval,
            "SendMessage": manager.send_message,
        }

    def start(self) -> int:
        """Bind and listen.

        Returns:
            The port the system picked.

        Raises:
            OSError: the address cannot be bound.
        """
        options: Dict[str, Any] = {}
        if "ping_interval" in _SERVE_PARAMETERS:  # websockets >= 15 pings by default; < 15 never
            options["ping_interval"] = None  # the host pings with protocol Ping frames; we never ping
        if "create_connection" in _SERVE_PARAMETERS:
            options["create_connection"] = _FastAckConnection
        listening = _listening_socket(self.bind, self.gate, self.send_timeout)
        try:
            self._server = serve(
                self._handle,
                sock=listening,
                process_request=self._process_request,
                max_size=self._max_size,
                compression=None,  # parts are small JSON; deflate costs more CPU than it saves
                close_timeout=_CLOSE_TIMEOUT,
                open_timeout=self.handshake_timeout,
                **options,
            )
        except BaseException:
            listening.close()
            raise
        # Each accepted socket has a slot in the gate until its thread (websockets' handler
        # for the whole connection, handshake included) ends.
        handler = self._server.handler
        gate = self.gate

        def counted(sock: socket.socket, address: Any) -> None:
            try:
                handler(sock, address)
            finally:
                gate.release(sock)

        self._server.handler = counted
        self._listening = listening
        return int(listening.getsockname()[1])

    def serve_forever(self) -> None:
        """Accept connections until :meth:`shutdown` (called from another thread).

        Our own loop instead of websockets' ``serve_forever``: a connection's thread that
        cannot be started (the task limit) refuses that connection with 503 and the loop goes
        on, where websockets' loop would end; and the threads are daemons, so a peer
        that never reads cannot keep the process from exiting."""
        assert self._server is not None and self._listening is not None, "call start() first"
        handler = self._server.handler
        self._accepting.set()
        try:
            while not self._stopping.is_set():
                try:
                    sock, address = self._listening.accept()
                except OSError:
                    break  # closed by shutdown() (or an error that is not a shortage)
                thread = threading.Thread(
                    target=self._run_handler,
                    args=(handler, sock, address),
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
                    _refuse(sock)
                    time.sleep(_ACCEPT_BACKOFF)
        finally:
            self._accept_ended.set()

    def _run_handler(self, handler: Callable[..., None], sock: socket.socket, address: Any) -> None:
        try:
            handler(sock, address)
        except Exception:  # websockets logs its own; a failure here ends this connection only
            log.exception("a connection's handler failed")
            try:
                sock.close()
            except OSError:
                pass
        finally:
            with self._lock:
                self._handlers.discard(threading.current_thread())

    def shutdown(self, timeout: float = _CLOSE_TIMEOUT + 2.0) -> None:
        """Stop listening, close every connection (1001) and wait for their threads, in at most
        about ``timeout`` seconds in all, whatever the peers do: a connection whose peer
        does not read (a send blocked in its socket) or does not answer the close is shut down
        at the socket. Idempotent; call it from a thread that is not a connection's."""
        if self._server is None:
            return
        deadline = time.monotonic() + timeout
        self._stopping.set()
        server = self._server
        # Hand-shaking connections are answered 503 by websockets once socket_closed is set.
        closed = getattr(server, "socket_closed", None)
        if closed is not None:
            closed.set()
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
        for name in ("shutdown_notifier", "shutdown_watcher"):  # websockets' own loop's pair
            pair = getattr(server, name, None)
            if pair is not None:
                try:
                    pair.close()
                except OSError:
                    pass
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
                _abort(ws.socket)
            thread = threading.Thread(target=_close_quietly, args=(ws,), daemon=True)
            try:
                thread.start()
            except RuntimeError:
                _abort(ws.socket)  # no thread to close it politely
                continue
            closers.append((ws, thread))
        end = min(deadline, time.monotonic() + _CLOSE_TIMEOUT + 0.5)
        for _, thread in closers:
            thread.join(max(0.0, end - time.monotonic()))
        for ws, thread in closers:
            if thread.is_alive():
                _abort(ws.socket)
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

    def _process_request(self, connection: ServerConnection, request: Any) -> Any:
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
        return None  # go on with the upgrade

    def _authorized(self, values: Any) -> bool:
        """C17: exactly one ``Authorization: Bearer <token>``, compared in constant time.

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

    def _handle(self, ws: ServerConnection) -> None:
        number = next(self._numbers)
        log.info("connection %d opened from %s", number, _peer(ws))
        conn = _Connection(self, ws, number)
        if isinstance(ws, _FastAckConnection):
            ws.ack_hook = conn.fast_ack
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
            log.info("connection %d closed", number)


def _close_quietly(ws: ServerConnection) -> None:
    try:
        ws.close(1001, "the bridge is shutting down")
    except Exception:
        pass  # closed was the goal


def _check_unicode(payload: Any) -> None:
    """Refuse strings the store cannot keep: JSON may carry a lone surrogate (``"\\ud800"``),
    which is not valid Unicode (B08: a typed failure, not a dead writer).

    Raises:
        BadRequest: the payload holds a lone surrogate.
    """
    try:
        json_text(payload)
    except ValueError as exc:
        raise BadRequest(f"payload: {exc}") from None


def _text(message: str) -> str:
    """``message`` as text any UTF-8 frame can carry: lone surrogates (from the peer's own
    JSON) become ``\\udxxx`` escapes."""
    return message.encode("utf-8", "backslashreplace").decode("utf-8")


def _peer(ws: ServerConnection) -> str:
    try:
        host, port = ws.remote_address[:2]
        return f"{host}:{port}"
    except Exception:
        return "?"


class _Connection:
    """One WebSocket connection: reads frames (in the websockets handler thread) and answers.

    ``_streams`` (the in-flight ReadTurns, by request id) is guarded by ``_lock``; every send
    goes through ``_send_lock``.
    """

    def __init__(self, server: BridgeServer, ws: ServerConnection, number: int) -> None:
        self.server = server
        self.number = number
        self._ws = ws
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()
        self._streams: Dict[Tuple[type, RequestId], _ReadStream] = {}
        self._closed = False
        self._sending_since: Optional[float] = None  # monotonic start of the send under way
        try:
            self._fd = ws.socket.fileno()
        except (AttributeError, OSError):  # pragma: no cover
            self._fd = -1

    # ------------------------------------------------------------------ sending

    def send_blocked(self, after: float = 0.5) -> bool:
        """True when a send has been under way for ``after`` seconds or more (the peer does
        not read): a polite close would wait for it."""
        since = self._sending_since
        return since is not None and time.monotonic() - since >= after

    def send(self, text: str) -> bool:
        """Send one text frame; return False when the connection is closed. A send that the
        socket does not take within the server's ``send_timeout`` drops the connection."""
        with self._send_lock:
            return self._send_locked(text)

    def try_send(self, text: str) -> Optional[bool]:
        """Send one text frame only if it goes at once: no other send under way, a frame of at
        most :data:`INLINE_BYTES` characters, and room for it in the socket's buffer beside
        what is queued there (so the calling thread, which may be a turn's or the store's,
        does not wait on a peer). Returns ``None`` when it did not send (send it with
        :meth:`send` from a thread that may wait), else as :meth:`send`."""
        if len(text) > INLINE_BYTES or not self._send_lock.acquire(blocking=False):
            return None
        try:
            if not _room(self._fd, len(text)):
                return None
            return self._send_locked(text)
        finally:
            self._send_lock.release()

    def _send_locked(self, text: str) -> bool:
        self._sending_since = time.monotonic()
        try:
            self._ws.send(text)
            return True
        except ConnectionClosed as exc:
            cause = exc.__cause__
            if isinstance(cause, (BlockingIOError, TimeoutError)):  # SO_SNDTIMEO ran out
                log.warning(
                    "connection %d: a send did not complete within %g s (the peer does not "
                    "read); connection dropped",
                    self.number,
                    self.server.send_timeout,
                )
            return False
        finally:
            self._sending_since = None

    def fast_ack(self, data: bytes) -> bool:
        """Handle an Ack frame in the thread that read it from the socket (websockets' own),
        sparing the hand-off to this connection's thread. Returns False for anything that is
        not a well-formed Ack (the connection's thread then reads it as usual)."""
        try:
            message = host_message(json.loads(data))
        except (ValueError, FrameError):
            return False
        if not isinstance(message, Ack):
            return False
        try:
            self._message(message)
        except Exception:  # a bug here must not end the connection's reading (B08)
            log.exception("connection %d: handling an Ack failed", self.number)
        return True

    def send_exit(self, request_id: RequestId, value: Any) -> None:
        """Answer a request with ``value`` (a Success or Failure); Die if it cannot be encoded."""
        try:
            text = encode(Exit(request_id, value))
            text.encode("utf-8")  # a lone surrogate would fail inside websockets and drop the connection
        except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
            log.error("connection %d: cannot encode the answer to %r: %s", self.number, request_id, exc)
            text = encode(Exit(request_id, Failure((Die(_text(f"the answer cannot be encoded: {exc}")),))))
        self.send(text)

    def send_fail(self, request_id: RequestId, error: Dict[str, Any]) -> None:
        """Answer with a typed error (``Fail``)."""
        self.send_exit(request_id, Failure((Fail(error),)))

    def send_die(self, request_id: RequestId, message: str) -> None:
        """Answer with a defect (``Die``): a bad request or a bug, for this request alone."""
        self.send_exit(request_id, Failure((Die(_text(message)),)))

    def send_defect(self, message: str) -> None:
        """Report a frame that no request can be blamed for (B08); the connection stays."""
        self.send(encode(Defect(_text(message))))

    # ------------------------------------------------------------------ reading

    def serve(self) -> None:
        """Read and answer frames until the connection closes, then stop its streams."""
        try:
            while True:
                try:
                    data = self._ws.recv(timeout=self.server.silence_timeout)
                except TimeoutError:
                    log.warning(
                        "connection %d: no frame for %s s, closing it",
                        self.number,
                        self.server.silence_timeout,
                    )
                    self._ws.close(1001, "silent for too long")
                    break
                except ConnectionClosed:
                    break
                self._frame(data)
        finally:
            with self._lock:
                self._closed = True
                streams = list(self._streams.values())
            for stream in streams:
                stream.stop("closed")
            deadline = time.monotonic() + _STREAM_JOIN_TIMEOUT
            for stream in streams:
                stream.join(max(0.0, deadline - time.monotonic()))

    def _frame(self, data: Any) -> None:
        try:
            objects = parse_frame(data)
        except FrameError as exc:
            self.send_defect(str(exc))
            return
        for obj in objects:
            try:
                message = host_message(obj)
            except FrameError as exc:
                if exc.request_id is not None:
                    self.send_die(exc.request_id, str(exc))
                else:
                    self.send_defect(str(exc))
                continue
            try:
                self._message(message)
            except Exception as exc:  # a bug here must not end the connection (B08)
                log.exception("connection %d: handling %r failed", self.number, message)
                if isinstance(message, Request):
                    self.send_die(message.id, f"{type(exc).__name__}: {exc}")
                else:
                    self.send_defect(f"{type(exc).__name__}: {exc}")

    def _message(self, message: Any) -> None:
        if isinstance(message, Request):
            self._request(message)
        elif isinstance(message, Ping):
            self.send(encode(Pong()))
        elif isinstance(message, Ack):
            stream = self._stream(message.request_id)
            if stream is not None:
                stream.ack()
        elif isinstance(message, Interrupt):
            stream = self._stream(message.request_id)
            if stream is not None:
                stream.stop("interrupt")
        elif isinstance(message, Eof):
            pass  # Effect clients may send it; nothing to do

    def _stream(self, request_id: RequestId) -> "Optional[_ReadStream]":
        with self._lock:
            return self._streams.get(_key(request_id))

    def forget(self, stream: "_ReadStream") -> None:
        """Remove a finished stream from the in-flight requests (before its Exit goes out),
        and from the bridge's count of streams."""
        with self._lock:
            if self._streams.get(_key(stream.request_id)) is not stream:
                return
            del self._streams[_key(stream.request_id)]
        self.server.give_stream()

    # ------------------------------------------------------------------ requests

    def _request(self, request: Request) -> None:
        if self._stream(request.id) is not None:
            self.send_die(request.id, f"request id {request.id!r} is already in flight on this connection")
            return
        rpc = CATALOGUE.get(request.tag)
        if rpc is None:
            self.send_die(request.id, f"unknown RPC {request.tag!r}")
            return
        try:
            args = rpc.decode_payload(request.payload)
            _check_unicode(request.payload)
        except RpcError as exc:  # BadRequest, RevisionExhausted
            self.send_fail(request.id, exc.to_wire())
            return
        if rpc.stream:
            self._read_turn(request.id, **args)
            return
        try:
            value = self.server.handlers[rpc.tag](**args)
        except RpcError as exc:
            self.send_fail(request.id, exc.to_wire())
            return
        except Exception as exc:
            log.exception("connection %d: %s failed", self.number, rpc.tag)
            self.send_die(request.id, f"{type(exc).__name__}: {exc}")
            return
        self.send_exit(request.id, Success(value))

    def _read_turn(
        self, request_id: RequestId, session_id: str, turn_id: str, offset: int, after_step: int
    ) -> None:
        try:
            turn = self.server.manager.find_turn(session_id, turn_id)
        except RpcError as exc:
            self.send_fail(request_id, exc.to_wire())
            return
        stream = _ReadStream(self, request_id, turn, offset, after_step)
        with self._lock:
            if self._closed:
                return
            if len(self._streams) >= self.server.max_streams_per_connection:
                busy = f"{len(self._streams)} streams are open on this connection, the most it may have"
            elif not self.server.take_stream():
                busy = f"{self.server.max_streams} streams are open in this bridge, the most it serves"
            else:
                busy = ""
                self._streams[_key(request_id)] = stream
        if busy:
            self.send_fail(request_id, Overloaded(f"{busy}: try again later", turnId=turn_id).to_wire())
            return
        stream.start()


class _ReadStream:
    """One ReadTurn: sends the turn's committed parts from ``offset`` as Chunks, one Chunk and
    then the host's Ack before the next, and ends with Exit right after ``turn-finish``.

    Sent by whichever thread makes progress, without a hand-off: the connection's thread sends
    the first Chunk (:meth:`start`); then the thread that committed new parts (:meth:`poke`: a
    paced driver's own thread, or the store's writer) or that read the Ack (:meth:`ack`:
    websockets' reader). Those send only what goes into the socket at once
    (:meth:`_Connection.try_send`); anything else (a big Chunk, a full socket, another send
    under way) is handed to the stream's own daemon thread, started the first time it is
    needed. :meth:`stop` (Interrupt, or the connection closing) ends it from any thread.

    State, under ``_lock``: ``_busy`` (a thread is sending for the stream: it alone moves
    ``position``), ``_again`` (work came while busy), ``_inflight`` (a Chunk awaits its Ack),
    ``_handoff`` (the stream's thread should take over), ``_ended`` (the end is under way).
    """

    def __init__(
        self, conn: _Connection, request_id: RequestId, turn: Turn, offset: int, after_step: int
    ) -> None:
        self.conn = conn
        self.request_id = request_id
        self.turn = turn
        self.offset = offset
        self.after_step = after_step
        self.position = offset
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._busy = True  # start() sends the first Chunks (from the offset)
        self._again = False
        self._inflight = False
        self._handoff = False
        self._ended = False
        self._stop_reason: Optional[str] = None
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        """Start streaming: send what is committed from the offset (in the calling thread,
        the connection's, which may wait on the socket)."""
        self.turn.add_reader(self)
        self._guarded(False)

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the stream's thread (if it has one) to end."""
        thread = self._thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join(timeout)

    def ack(self) -> None:
        """The host took the last Chunk: send the next one now, if parts wait."""
        with self._lock:
            self._inflight = False
            if self._busy:
                self._again = True
                return
            if self._stop_reason is not None or self._ended:
                return
            self._busy = True
        self._guarded(True)

    def poke(self) -> None:
        """New parts are committed (see :class:`~bridge_client.bridge.turns.Reader`)."""
        with self._lock:
            if self._busy:
                self._again = True
                return
            if self._inflight or self._stop_reason is not None or self._ended:
                return
            self._busy = True
        self._guarded(True)

    def stop(self, reason: str) -> None:
        """Stop streaming: ``interrupt`` answers Exit Failure[Interrupt]; ``closed`` sends nothing.
        The thread that sends for the stream (if one does) ends it; else this one."""
        with self._lock:
            if self._stop_reason is None:
                self._stop_reason = reason
            self._cond.notify_all()
            if self._busy or self._ended:
                return
            self._busy = self._ended = True
        self._stopped()

    def _guarded(self, inline: bool) -> None:
        """:meth:`_pump`, ending the stream with Die if it fails (a bug)."""
        try:
            self._pump(inline)
        except Exception as exc:
            log.exception("connection %d: ReadTurn %r failed", self.conn.number, self.request_id)
            with self._lock:
                self._ended = True
                self._cond.notify_all()
            self.turn.remove_reader(self)
            self.conn.forget(self)
            self.conn.send_die(self.request_id, f"{type(exc).__name__}: {exc}")

    def _pump(self, inline: bool) -> None:
        """Send what the host may get now; the caller set ``_busy`` (which this clears, or
        hands to the stream's thread). ``inline``: a thread that must not wait on the socket."""
        turn = self.turn
        while True:
            if self._stop_reason is not None:
                break
            texts, position, done = turn.take(self.position, self.after_step)
            if texts:
                frame = encode_chunk_raw(self.request_id, texts)
                with self._lock:
                    self._inflight = True
                sent = self.conn.try_send(frame) if inline else self.conn.send(frame)
                if sent is None:  # not at once: the stream's own thread sends it
                    with self._lock:
                        self._inflight = False
                    if self._hand_off():
                        return
                    sent = self.conn.send(frame)  # no thread to be had: send it here
                    with self._lock:
                        self._inflight = True
                if not sent:
                    self.stop("closed")
                    break
            self.position = position
            if done:
                self._end()
                return
            with self._lock:
                if self._again and not self._inflight:
                    self._again = False
                    continue
                self._again = False
                self._busy = False
                return
        with self._lock:  # stopped: this thread ends the stream
            self._busy = True
            ended, self._ended = self._ended, True
            self._cond.notify_all()
        if not ended:
            self._stopped()

    def _hand_off(self) -> bool:
        """Give the stream (``_busy`` and all) to its own thread, started now if it has none.
        False when no thread can be started (the caller sends itself)."""
        with self._lock:
            self._handoff = True
            self._cond.notify_all()
            if self._thread is not None:
                return True
            thread = threading.Thread(
                target=self._run, name=f"bridge-read-{self.conn.number}-{self.request_id}", daemon=True
            )
            self._thread = thread
        try:
            thread.start()
        except RuntimeError as exc:  # "can't start new thread": B09, the caller goes on itself
            log.warning("connection %d: cannot start a stream's thread (%s)", self.conn.number, exc)
            with self._lock:
                self._thread = None
                self._handoff = False
            return False
        return True

    def _end(self) -> None:
        """``turn-finish`` is sent: answer Exit Success."""
        with self._lock:
            self._ended = True
            self._cond.notify_all()
        self.turn.remove_reader(self)
        self.conn.forget(self)
        self.conn.send_exit(self.request_id, Success(None))

    def _stopped(self) -> None:
        """The end after :meth:`stop`, once (whoever set ``_ended``)."""
        self.turn.remove_reader(self)
        self.conn.forget(self)
        if self._stop_reason == "interrupt":
            self.conn.send_exit(self.request_id, Failure((Interrupted(),)))

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._handoff and not self._ended:
                    self._cond.wait()
                if not self._handoff:
                    return
                self._handoff = False
            self._guarded(False)

"""One WebSocket connection to a bridge: a reader thread, request routing, acks, pings.

A :class:`Connection` never reconnects: when it drops, every pending request fails with
:class:`~bridge_client.errors.ConnectionLost` and the object is finished. The session decides
whether to send a request again over a new one.

Threads: the caller's threads send requests and read their answers; one daemon reader thread
(``bridge-client-reader-<id>``) alone reads the socket, routes Chunks and Exits by request id,
acks Chunks while the request's buffer has room (:doc:`protocol`, "Streams and acks"), sends ``Ping``
every ``ping_interval`` seconds, and declares the connection lost after
``ping_interval + ping_timeout`` seconds of silence, even on a half-open socket.
"""
from __future__ import annotations

import itertools
import logging
import os
import socket
import ssl
import threading
import time
from typing import Any, Dict, List, Optional, Tuple, Union

import websocket

from ..errors import ConnectionLost, ProtocolError, Unauthorized, UntrustedEndpoint
from ..redacted import Redacted
from ..sandbox.base import Endpoint
from ..wire import frames
from ..wire.delta_chunk import delta_chunk
from ..wire.frames import Ack, Chunk, Exit, Interrupt, Ping, Success
from ..wire.upgrade import redact_library_loggers
from . import forksafe, transport
from .connection_life import ConnectionLife, Event, State
from .failures import failure_error
from .routing import _HIGH_WATER, Routing  # noqa: F401 (_HIGH_WATER: tests read it here)
from .stream import END, Pending, Stream, StreamClosed

__all__ = ["Connection", "Stream", "StreamClosed", "END"]

log = logging.getLogger("bridge_client")
redact_library_loggers()  # websocket-client's trace logs the upgrade's Authorization header

_ids = itertools.count(1)


class Connection(Routing):
    """One WebSocket connection to a bridge (see :doc:`protocol`).

    Opening it performs the upgrade with ``Authorization: Bearer <token>`` and the endpoint's
    own headers, then starts the reader thread.

    Args:
        endpoint: where to connect (from ``Sandbox.expose``).
        token: the bridge's token.
        open_timeout: seconds for TCP connect, TLS and the upgrade together.
        ping_interval: seconds between ``Ping`` frames.
        ping_timeout: extra seconds of silence after ``ping_interval`` before the connection
            counts as lost.
        ca_bundle: CA certificates (a PEM file or a folder) to verify a ``wss://`` endpoint
            with, instead of the system's; proxies come from the environment (see
            :mod:`.transport`).
        holder: a list the new connection appends itself to before it opens anything, so that
            a caller interrupted (``KeyboardInterrupt``) before the constructor returns can still
            close it. The constructor itself closes what it opened when it fails or is
            interrupted.

    A connection belongs to the process that opened it: in a forked child it counts as
    closed, and closing it there leaves the parent's connection alone (:mod:`.forksafe`).

    A send cut short (a ``KeyboardInterrupt`` in the middle of a large request) may leave half
    a frame on the wire: the connection is then closed at once (pending requests fail with
    ``ConnectionLost``) and the interrupt goes on up; the session's next call opens a new one.

    Raises:
        Unauthorized: the bridge answered 401 (a missing or wrong token; never retried).
        UntrustedEndpoint: the ``wss://`` endpoint's certificate did not verify.
        ConnectionLost: nothing answered, the upgrade failed, or it took longer than
            ``open_timeout`` (nothing usable listens there).
    """

    def __init__(
        self,
        endpoint: Endpoint,
        token: Redacted,
        *,
        open_timeout: float = 10.0,
        ping_interval: float = 5.0,
        ping_timeout: float = 5.0,
        ca_bundle: Optional[str] = None,
        holder: Optional[List["Connection"]] = None,
    ) -> None:
        self.url = endpoint.url
        self._pid = os.getpid()
        self.name = f"{next(_ids):x}"
        self._ping_interval = ping_interval
        self._silence_limit = ping_interval + ping_timeout
        # Request ids go out as strings ("1", "2", ...), as Effect RPC clients encode them:
        # Effect servers answer with string ids whatever they were sent.
        self._pending: Dict[str, Pending] = {}
        self._lock = threading.Lock()  # guards _pending, _next_id, _life, _error
        self._next_id = 1
        # Connecting, open, broken, closing, closed: every move through the table (one lock).
        self._life = ConnectionLife()
        self._error: Optional[BaseException] = None
        # Both set by _open; None until then (close() copes with either missing).
        self._ws: Any = None  # websocket-client's WebSocket, or a PlainWebSocket (direct ws://)
        self._reader: Optional[threading.Thread] = None
        if holder is not None:
            holder.append(self)
        try:
            self._open(endpoint, token, open_timeout, ca_bundle)
        except BaseException:  # a failed or interrupted open leaves no socket and no thread
            self.close()
            raise
        forksafe.track(self)
        log.debug("connected to %s (connection %s)", endpoint.url, self.name)

    def _open(
        self, endpoint: Endpoint, token: Redacted, open_timeout: float, ca_bundle: Optional[str]
    ) -> None:
        """Upgrade, then start the reader (see the class docstring for the errors)."""
        headers = [f"{name}: {value}" for name, value in endpoint.headers]
        headers.append(f"Authorization: Bearer {token.reveal()}")
        try:
            # Verification on, CA bundle, proxies: websocket-client's own options.
            how = transport.open_options(endpoint.url, ca_bundle, open_timeout)
            if "socket" in how:  # a direct ws://: websockets' client protocol (plain_ws), imported late
                from .plain_ws import PlainWebSocket
                self._ws = PlainWebSocket.opened(how["socket"], endpoint.url, headers)
            else:
                self._ws = websocket.create_connection(
                    endpoint.url, timeout=open_timeout, header=headers, enable_multithread=True,
                    skip_utf8_validation=True,  # Python's UTF-8 codec still rejects bad text
                    suppress_origin=True, **how,
                )
        except ssl.SSLCertVerificationError as exc:
            raise UntrustedEndpoint(f"{endpoint.url}: {exc.verify_message or exc}") from None
        except websocket.WebSocketBadStatusException as exc:
            if exc.status_code == 401:
                raise Unauthorized(f"the bridge at {endpoint.url} refused the token (HTTP 401)") from None
            raise ConnectionLost(
                f"{endpoint.url} answered HTTP {exc.status_code}, not a bridge upgrade"
            ) from None
        except (OSError, websocket.WebSocketException, ssl.SSLError) as exc:
            raise ConnectionLost(f"cannot connect to {endpoint.url}: {exc}") from None
        # The reader wakes at least this often to ping and to measure silence.
        ping_timeout = self._silence_limit - self._ping_interval
        self._ws.settimeout(max(0.01, min(self._ping_interval, ping_timeout) / 2))
        self._last_rx = self._last_ping = time.monotonic()
        with self._lock:
            self._life.move(Event.OPENED)
        self._reader = threading.Thread(
            target=self._read_loop, name=f"bridge-client-reader-{self.name}", daemon=True
        )
        self._reader.start()

    # ------------------------------------------------------------------ public

    @property
    def closed(self) -> bool:
        """True once the connection has dropped or was closed, or in a forked child."""
        return self._life.stopped or self._pid != os.getpid()

    def call(self, tag: str, payload: Any, timeout: Optional[float] = None) -> Any:
        """Send a request and wait for its single answer.

        Args:
            tag: the RPC name; payload: its JSON payload.
            timeout: seconds to wait for the answer; ``None`` waits until it comes or the
                connection is lost.

        Returns:
            The ``Success`` value (plain JSON).

        Raises:
            ConnectionLost: the connection dropped, or no answer came within ``timeout``
                (the connection is then closed: a bridge that does not answer is lost).
            RpcError: the bridge answered with a typed failure.
            ProtocolError: the bridge answered with a defect.
        """
        return self.answer(self.request(tag, payload), tag, timeout)

    def request(self, tag: str, payload: Any) -> Pending:
        """Send a request that does not stream and return at once; take the answer with
        :meth:`answer`, or drop it with :meth:`forget`. Raises as :meth:`call` does."""
        pending, data = self._register(tag, payload, stream=False)
        self._transmit(data)
        return pending

    def answer(self, pending: Pending, tag: str, timeout: Optional[float] = None) -> Any:
        """Wait for the answer to a :meth:`request`, as :meth:`call` does (same errors)."""
        try:
            with pending.cond:
                done = pending.cond.wait_for(lambda: pending.outcome is not None, timeout)
                outcome = pending.outcome
        except BaseException:  # KeyboardInterrupt: nobody waits for the answer any more
            self.forget(pending)
            raise
        if not done:
            self.close()
            raise ConnectionLost(f"{tag}: no answer within {timeout} s")
        return self._finish(pending, outcome)  # type: ignore[arg-type]

    def forget(self, pending: Pending) -> None:
        """Nobody waits for a :meth:`request`'s answer: drop it (a late answer is ignored)."""
        with self._lock:
            self._pending.pop(pending.id, None)

    def stream(self, tag: str, payload: Any, holder: Optional[List[Stream]] = None) -> Stream:
        """Send a streaming request and return its :class:`Stream`.

        Args:
            holder: a list the stream is appended to before the request is sent, so that a
                caller interrupted before this returns can still close it (no orphan stream
                filling this connection's memory).

        Raises:
            ConnectionLost: the connection is already closed.
        """
        box: List[Stream] = [] if holder is None else holder
        self._transmit(self._register(tag, payload, stream=True, holder=box)[1])
        return box[-1]  # (only the caller's thread appends to its holder)

    def request_and_stream(self, tag: str, payload: Any, stream_tag: str, stream_payload: Any,
                           holder: List[Stream]) -> Tuple[Pending, Stream]:
        """:meth:`request` then :meth:`stream` in one frame (a JSON array, served in order): one
        write. ``holder`` as for :meth:`stream`; an interrupted request is forgotten."""
        if self._pid != os.getpid():
            self._drop_inherited()
        with self._lock:  # one pass through the table's lock for both ids, and one below
            if self._life.stopped:
                raise ConnectionLost(f"connection {self.name} is closed") from self._error
            first_id, second_id = str(self._next_id), str(self._next_id + 1)
            self._next_id += 2
        try:
            first = frames.encode_request(first_id, tag, payload)
        except (TypeError, ValueError) as exc:
            raise ProtocolError(f"{tag}: the request cannot be encoded as JSON text: {exc}") from None
        try:
            second = frames.encode_request(second_id, stream_tag, stream_payload)
            data = f"[{first},{second}]".encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise ProtocolError(f"{stream_tag}: the request cannot be encoded as JSON text: {exc}") from None
        # One condition for both: the caller waits for the answer, then for the stream.
        pending = Pending(first_id, False)
        streaming = Pending(second_id, True, pending.cond)
        stream = Stream(self, streaming)
        holder.append(stream)  # before the table: an interrupt from here on cannot orphan it
        with self._lock:
            if self._life.stopped:
                raise ConnectionLost(f"connection {self.name} is closed") from self._error
            self._pending[first_id] = pending
            self._pending[second_id] = streaming
        try:
            self._transmit(data)
        except BaseException:
            self.forget(pending)
            raise
        return pending, stream

    def close(self) -> None:
        """Close the connection; pending requests fail with ``ConnectionLost``. Idempotent;
        may be called from any thread, the reader included."""
        if self._pid != os.getpid():
            self._drop_inherited()  # never touch the parent's connection
            return
        with self._lock:
            before = self._life.move(Event.CLOSE)
            if before in (State.CLOSING, State.CLOSED):
                return
            if self._ws is None:  # the upgrade never finished: nothing to close
                self._life.move(Event.ENDED)
                return
        ws, reader = self._ws, self._reader
        if before is not State.BROKEN:  # after a cut-short send, a close frame would be garbage
            try:
                ws.send_close()
            except Exception:  # closing anyway: the peer may be gone
                pass
        ws.abort()  # wakes the reader, which fails what is pending
        if reader is None or reader.ident is None:
            # No reader ran (an interrupted open): close the socket and fail what is pending here.
            self._fail_all(ConnectionLost(f"connection {self.name} closed"))
            try:
                ws.shutdown()
            except Exception:
                pass
        elif threading.current_thread() is not reader:
            reader.join(timeout=5.0)

    # ------------------------------------------------------------------ internals

    def _after_fork_in_child(self) -> None:
        """Called by :mod:`.forksafe` in a forked child: a new lock (a thread of the parent
        may have held the old one), then :meth:`_drop_inherited`."""
        self._lock = threading.Lock()
        self._drop_inherited()

    def _drop_inherited(self) -> None:
        """In a process other than the opener: count as closed, fail what was pending (no
        thread of this process waits on it), and close this process's copy of the socket
        without a WebSocket close or a TCP shutdown, so that the parent's connection goes on
        undisturbed. Idempotent."""
        if self._pid == -1:
            return
        self._life.move(Event.FORKED)
        self._pid = -1
        error = ConnectionLost(f"connection {self.name} belongs to the parent process")
        for p in self._pending.values():
            p.cond = threading.Condition(threading.Lock())
            if p.outcome is None:
                p.outcome = error
        self._pending = {}
        sock = getattr(self._ws, "sock", None)
        if sock is not None:
            try:
                sock.close()  # closes the descriptor only; no close_notify, no shutdown
            except OSError:
                pass

    def _register(self, tag: str, payload: Any, stream: bool, holder: Any = None) -> Tuple[Pending, bytes]:
        """Encode a request and enter it in the pending table (nothing sent yet)."""
        if self._pid != os.getpid():
            self._drop_inherited()
        with self._lock:
            if self._life.stopped:
                raise ConnectionLost(f"connection {self.name} is closed") from self._error
            request_id = str(self._next_id)
            self._next_id += 1
        try:
            data = frames.encode_request(request_id, tag, payload).encode("utf-8")
        except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
            raise ProtocolError(f"{tag}: the request cannot be encoded as JSON text: {exc}") from None
        pending = Pending(request_id, stream)
        if holder is not None:  # before the table: an interrupt from here on cannot orphan it
            holder.append(Stream(self, pending))
        with self._lock:
            if self._life.stopped:
                raise ConnectionLost(f"connection {self.name} is closed") from self._error
            self._pending[request_id] = pending
        return pending, data

    def _transmit(self, data: Union[bytes, str]) -> None:
        try:
            self._ws.send(data, websocket.ABNF.OPCODE_TEXT)
        except (OSError, websocket.WebSocketException) as exc:
            self._lost(exc)
        except BaseException:
            self._cut_short()
            raise

    def _send_quietly(self, message: Union[Ack, Interrupt, Ping]) -> None:
        self._transmit(frames.encode(message))

    def _cut_short(self) -> None:
        """A send was interrupted (``KeyboardInterrupt``): part of a frame may be on the wire,
        and the bridge would read whatever we send next as its rest. The connection is broken
        at once (no close frame: it would be read the same way); the next call opens a new
        one instead of waiting for the keepalive to notice."""
        with self._lock:
            self._life.move(Event.CUT_SHORT)
        self._lost(ConnectionLost(f"a send on connection {self.name} was cut short"))

    def _finish(self, pending: Pending, outcome: Union[Exit, BaseException]) -> Any:
        with self._lock:
            self._pending.pop(pending.id, None)
        if isinstance(outcome, BaseException):
            raise outcome
        if isinstance(outcome.exit, Success):
            return END if pending.stream else outcome.exit.value
        raise failure_error(outcome.exit)

    def _abandon(self, pending: Pending) -> None:
        with self._lock:
            active = self._pending.pop(pending.id, None) is not None and not self._life.stopped
        with pending.cond:
            finished = pending.outcome is not None
            if not finished:
                # Wake a reader blocked in take(): this stream is over for it.
                pending.outcome = StreamClosed(f"request {pending.id} was closed by this host")
                pending.cond.notify_all()
        if active and not finished:
            self._send_quietly(Interrupt(pending.id))

    def _lost(self, cause: BaseException) -> None:
        """Fail every pending request and close. Safe from any thread."""
        with self._lock:
            if self._error is None:
                self._error = cause
        self.close()

    def _fail_all(self, error: BaseException) -> None:
        with self._lock:
            self._life.move(Event.ENDED)
            pending = list(self._pending.values())
            self._pending.clear()
        for p in pending:
            with p.cond:
                if p.outcome is None:
                    p.outcome = error
                p.cond.notify_all()

    def _read_loop(self) -> None:
        error: BaseException = ConnectionLost(f"connection {self.name} closed")
        try:
            while not self._life.stopped:
                try:
                    opcode, data = self._ws.recv_data()
                except websocket.WebSocketTimeoutException:
                    opcode = None
                now = time.monotonic()
                if opcode is None:
                    if now - self._last_rx > self._silence_limit:
                        raise ConnectionLost(f"no frame from the bridge for {now - self._last_rx:.1f} s")
                else:
                    self._last_rx = now
                    if opcode == websocket.ABNF.OPCODE_CLOSE:
                        if self._life.stopped:
                            break  # the echo of our own close
                        raise ConnectionLost("the bridge closed the connection")
                    p, early = self._ack_early(data)
                    acked = p if early else None
                    # A stream that takes parts: a Chunk of deltas is built into parts at once.
                    built = delta_chunk(data) if p is not None and p.parts else None
                    if built is not None and p is not None and built[0] == p.id:
                        self._route(Chunk(p.id, built[1]), acked)
                    else:
                        objs = frames.parse_frame(data)
                        if len(objs) == 1:
                            self._route(frames.bridge_message(objs[0]), acked)
                        else:
                            self._route_frame(objs, acked)
                if now - self._last_ping >= self._ping_interval:
                    self._last_ping = now
                    self._ws.send(frames.encode(Ping()))
        except ConnectionLost as exc:
            error = exc
        except ProtocolError as exc:
            error = exc
            log.debug("connection %s: protocol error from the bridge: %s", self.name, exc)
        except (OSError, websocket.WebSocketException, ssl.SSLError, socket.timeout) as exc:
            if not self._life.stopped:
                error = ConnectionLost(f"connection {self.name} dropped: {exc}")
        except Exception as exc:  # a bug here must still fail the callers, not hang them
            log.exception("connection %s: reader failed", self.name)
            error = ConnectionLost(f"connection {self.name} failed: {exc!r}")
        finally:
            if self._error is not None and isinstance(error, ConnectionLost) and error.__cause__ is None:
                error.__cause__ = self._error
            self._fail_all(error)
            try:
                self._ws.shutdown()
            except Exception:
                pass
            said = str(error)  # most errors already say "connection N closed/dropped/failed"
            if not said.startswith(f"connection {self.name} "):
                said = f"connection {self.name} closed: {said}"
            log.debug("%s", said)

    def __repr__(self) -> str:
        state = "closed" if self._life.stopped else "open"
        return f"<Connection {self.name} {self.url} {state}>"

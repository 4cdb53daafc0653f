"""How a :class:`~.connection.Connection`'s reader thread routes what the bridge sends: Chunks
into their stream's buffer (acked while it has room: :doc:`protocol`, "Streams and acks"),
Exits to their request, a frame of several messages routed whole before its waiters wake.

The reader's side of :class:`~.stream.Pending`; the connection itself (its socket, its table
of requests, its thread) is :mod:`.connection`'s.
"""
from __future__ import annotations

import threading
from typing import Any, Dict, List, Optional, Tuple, Union

from ..errors import ConnectionLost, ProtocolError
from ..wire import frames
from ..wire.frames import Ack, Chunk, Defect, Exit, Interrupt, Ping
from .stream import Pending

__all__ = ["Routing"]

_HIGH_WATER = 4096  # values buffered per stream before the Ack is held back (back-pressure)
_FLOOD_LIMIT = 16 * _HIGH_WATER  # values buffered, with the Ack held back, before the bridge is at fault
_CHUNK_HEAD = b'{"_tag":"Chunk","requestId":"'  # how our bridge starts a Chunk (string ids)
_ACK = b'{"_tag":"Ack","requestId":"%s"}'


class Routing:
    """The routing methods of :class:`~.connection.Connection` (its reader thread's)."""

    _lock: threading.Lock
    _pending: Dict[str, Pending]
    _ws: Any

    def _send_quietly(self, message: Union[Ack, Interrupt, Ping]) -> None:  # pragma: no cover
        raise NotImplementedError

    def _ack_early(self, data: Any) -> Tuple[Optional[Pending], bool]:
        """Ack a Chunk as soon as its frame is in, before its JSON is parsed, when its stream's
        buffer has room (the ack the routing would send anyway): the bridge prepares the next
        Chunk while this one is decoded. Returns the Chunk's open stream (or ``None``) and
        whether it was acked."""
        if type(data) is not bytes or not data.startswith(_CHUNK_HEAD):
            return None, False
        end = data.find(b'"', len(_CHUNK_HEAD))
        if end < 0:
            return None, False
        request_id = data[len(_CHUNK_HEAD) : end].decode("ascii", "replace")
        with self._lock:
            p = self._pending.get(request_id)
        if p is None or not p.stream:
            return None, False
        with p.cond:
            if p.ack_owed or len(p.values) >= _HIGH_WATER or p.outcome is not None:
                return p, False
        self._ws.send(_ACK % data[len(_CHUNK_HEAD) : end])
        return p, True

    def _route(
        self, message: frames.BridgeMessage, acked: Optional[Pending] = None,
        later: Optional[List[Tuple[Pending, bool]]] = None,
    ) -> None:
        """Route one message. With ``later`` (a frame of several messages), the waiter's wake
        and the Ack are left to :meth:`_wake_and_ack`: ``(pending, ack)`` is appended."""
        if isinstance(message, Chunk):
            with self._lock:
                p = self._pending.get(str(message.request_id))
            if p is None or not p.stream:
                return  # a late chunk of an interrupted stream
            if acked is p:
                with p.cond:
                    p.values.extend(message.values)
                    if later is None:
                        p.cond.notify()
                if later is not None:
                    later.append((p, False))
                return
            with p.cond:
                if p.ack_owed and len(p.values) >= _FLOOD_LIMIT:
                    # We held back the Ack and the bridge sent on anyway, far past our buffer:
                    # a bridge that ignores back-pressure would grow this host's memory without end.
                    raise ProtocolError(
                        f"the bridge ignores back-pressure: {len(p.values)} values of request {p.id} "
                        "buffered and it keeps sending without an Ack"
                    )
                p.values.extend(message.values)
                ack_now = len(p.values) < _HIGH_WATER
                p.ack_owed = not ack_now
                if later is None:
                    p.cond.notify()
            if later is not None:
                later.append((p, ack_now))
            elif ack_now:
                self._send_quietly(Ack(p.id))
        elif isinstance(message, Exit):
            with self._lock:
                p = self._pending.get(str(message.request_id))
            if p is None:
                return
            with p.cond:
                p.outcome = message
                if later is None:
                    p.cond.notify_all()
            if later is not None:
                later.append((p, False))
        elif isinstance(message, Defect):
            # A message the bridge cannot pin on one request: the end of this connection's
            # state, not of the requests on it. They fail with ConnectionLost and are sent again
            # (or read on from their offset) over a new connection (docs/protocol.md).
            raise ConnectionLost(f"the bridge reported a defect: {message.defect}"[:500])
        # Pong: a sign of life, counted by the caller.

    def _route_frame(self, objs: List[Any], acked: Optional[Pending]) -> None:
        """Route a frame of several messages (the bridge's answer to StartTurn and ReadTurn in
        one: Exit, Chunk, often the stream's Exit): every message first, then the wakes, then
        the Acks. A waiter woken before the rest of the frame was routed would only wait for
        this thread's GIL; an Ack sent first would hold up its wake."""
        later: List[Tuple[Pending, bool]] = []
        for obj in objs:  # (a bad message ends the connection: _fail_all wakes every waiter)
            self._route(frames.bridge_message(obj), acked, later)
        self._wake_and_ack(later)

    def _wake_and_ack(self, later: List[Tuple[Pending, bool]]) -> None:
        woken: List[threading.Condition] = []
        for p, _ in later:
            cond = p.cond
            if cond not in woken:  # (requests may share one)
                woken.append(cond)
                with cond:
                    cond.notify_all()
        for p, ack in later:
            # No Ack for a stream whose Exit came in the same frame: no Chunk follows it.
            if ack and p.outcome is None:
                self._send_quietly(Ack(p.id))

"""A request in flight on a :class:`~bridge_client.client.connection.Connection`, and the
stream of values a streaming request (``ReadTurn``) answers with.

The connection's reader thread fills a :class:`Pending` (values, outcome, an Ack owed); the
caller's thread takes them through :class:`Stream`. Taking values frees room in the buffer,
which releases a held-back Ack (back-pressure, :doc:`protocol`, "Streams and acks").
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Any, Deque, List, Optional, Protocol, Union

from ..wire.frames import Ack, Exit, Interrupt, Ping

__all__ = ["END", "Pending", "Stream", "StreamClosed"]

END = object()
"""Returned by :meth:`Stream.next` when the stream ended with ``Exit Success``."""


class StreamClosed(Exception):
    """Raised by :meth:`Stream.take` after :meth:`Stream.close` (this host stopped reading:
    a suspend or a release). The connection itself is fine."""


class _Owner(Protocol):
    """What a :class:`Stream` needs of its connection (implemented by ``Connection``)."""

    def _send_quietly(self, message: Union[Ack, Interrupt, Ping]) -> None: ...

    def _finish(self, pending: "Pending", outcome: Union[Exit, BaseException]) -> Any: ...

    def _abandon(self, pending: "Pending") -> None: ...


class Pending:
    """One request in flight: its buffered values, its outcome, and whether an Ack is owed.

    All fields are guarded by ``cond``.
    """

    __slots__ = ("id", "stream", "cond", "values", "outcome", "ack_owed", "parts")

    def __init__(self, request_id: str, stream: bool, cond: Optional[threading.Condition] = None) -> None:
        self.id = request_id
        self.stream = stream
        # Requests one thread waits for in turn may share one (StartTurn and its ReadTurn).
        self.cond = threading.Condition(threading.Lock()) if cond is None else cond
        self.values: Deque[Any] = deque()
        self.outcome: Optional[Union[Exit, BaseException]] = None
        self.ack_owed = False
        # Set by Stream.take_parts(): the reader may put built parts among the values.
        self.parts = False


class Stream:
    """The answer to a streaming request (``ReadTurn``): values, then the end.

    Read it with :meth:`take` from one thread at a time. :meth:`close` interrupts it.
    """

    def __init__(self, connection: _Owner, pending: Pending) -> None:
        self._connection = connection
        self._pending = pending

    def take(self, timeout: Optional[float] = None) -> Union[List[Any], object]:
        """Return every value buffered so far (at least one), or :data:`END` once the stream
        ended with ``Exit Success`` and every value was taken.

        Taking values frees room in the buffer, which releases a held-back Ack (back-pressure).

        Args:
            timeout: seconds to wait for a value; ``None`` waits until one arrives or the
                connection is lost (the keepalive bounds that).

        Raises:
            ConnectionLost: the connection dropped before the stream ended.
            StreamClosed: :meth:`close` was called (from another thread).
            RpcError: the bridge ended the stream with a typed failure.
            ProtocolError: the bridge ended it with a defect.
            TimeoutError: nothing arrived within ``timeout``.
        """
        p = self._pending
        with p.cond:
            if not p.values and p.outcome is None:
                if not p.cond.wait_for(lambda: p.values or p.outcome is not None, timeout):
                    raise TimeoutError(f"no part within {timeout} s")
            if p.values:
                values: List[Any] = list(p.values)
                p.values.clear()
                send_ack, p.ack_owed = p.ack_owed, False
                outcome = None
            else:
                outcome = p.outcome
        if outcome is None:
            if send_ack:
                self._connection._send_quietly(Ack(p.id))
            return values
        result: object = self._connection._finish(p, outcome)
        return result

    def take_parts(self) -> None:
        """From now on a Chunk of text or reasoning deltas in this package's form may give
        :class:`~bridge_client.wire.parts.Part` objects among the values instead of their JSON
        objects (built once, by the connection's reader; ``ReadTurn`` streams of a turn)."""
        self._pending.parts = True

    def close(self) -> None:
        """Stop reading: send ``Interrupt`` if the stream has not ended. Idempotent."""
        self._connection._abandon(self._pending)

"""Parts into the store: the :class:`~bridge_client.bridge.driver.TurnSink` of one run of a
turn, and the appends of the bridge's own parts.

Hot path: a driver's part is encoded once (:func:`~bridge_client.bridge.store.part_text`)
and that one string is the SQLite segment's content, the in-memory log's entry, and what
a Chunk carries; appending it takes the turn's lock only (no store lock, no object per part
beyond the string and its ``(step, attempt, type)``). A lone part is committed in the
emitting thread; a burst is handed to the store's writer (group commit): see
:data:`_INLINE_GAP`.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from ..wire.parts import SessionState
from .store import MAX_PENDING, Meta, Op, Store, StoreError, Ticket, _encode_str, _utf8_checked
from .store import part_text, text_parts
from .turn_life import _Abandoned
from .turn_log import Turn

__all__ = ["append_part", "wait_room", "RunSink"]

_monotonic = time.monotonic

FinishStep = Callable[[Turn, int, int, str, Any], None]
SetState = Callable[[Turn, Any, Optional[int], int], SessionState]


def append_part(
    store: Store,
    turn: Turn,
    kind: str,
    step: Optional[int],
    attempt: int,
    fields: Dict[str, Any],
    extra: Sequence[Op] = (),
    force: bool = False,
    wake: bool = True,
) -> Tuple[int, Ticket]:
    """Append one part (and ``extra`` ops, in the same transaction); return
    ``(index, ticket)``. Raises TypeError/ValueError (nothing written) for non-JSON fields,
    and _Abandoned when the bridge is shutting down. ``force``: the manager's own end of
    an abandoned turn (written although its driver may write no more). ``wake=False``: the
    caller has the part committed itself (``Store.wait``) or wakes the writer later."""
    buffer = turn.buffer
    assert buffer is not None
    with turn.append_lock:
        if turn.abandoned and not force:
            raise _Abandoned()
        index = turn.next_index
        text = part_text(kind, index, step, attempt, fields)
        try:
            pending = buffer.add(index, text, (step, attempt, kind), extra, wake)
        except StoreError:
            turn.abandoned = True
            raise _Abandoned() from None
        turn.next_index = index + 1
        if kind == "step-start" and step is not None:
            turn.max_attempt[step] = max(turn.max_attempt.get(step, 0), attempt)
    if pending >= MAX_PENDING:
        wait_room(store, turn)
    return index, buffer.ticket(index)

def wait_room(store: Store, turn: Turn) -> None:
    """Back-pressure: wait until the writer took the turn's buffered parts (raises
    _Abandoned when the store failed or closed meanwhile). Called without the turn's lock."""
    assert turn.buffer is not None
    try:
        store.wait_room(turn.buffer)
    except StoreError:
        with turn.append_lock:
            turn.abandoned = True
        raise _Abandoned() from None


_INLINE_GAP = 0.001
"""Seconds between a driver's parts at or above which its part is committed in its own thread
(:meth:`~bridge_client.bridge.store.Store.commit_here`): a paced stream's lone delta goes to the
log and to its readers without a thread hand-off. A part that comes sooner than this after the
previous one, or right after one that did, is handed to the store's writer, which commits what
queued meanwhile together (group commit), so that a fast driver never waits on the disk and a
fast driver the scheduler paused does not start committing each part itself when it goes on.
A paced stream that falls behind and emits two deltas at once hands two to the writer, not the
next 50 ms of its deltas. Neither way waits for company."""


class RunSink:
    """The :class:`~bridge_client.bridge.driver.TurnSink` of one run of a turn."""

    def __init__(
        self, turn: Turn, store: Store, finish_step: FinishStep, set_state: SetState,
        start: Optional[float] = None,
    ) -> None:
        self._turn = turn
        assert turn.buffer is not None
        self._buffer = turn.buffer
        self._store = store
        self._finish_step = finish_step
        self._set_state = set_state
        # Monotonic end of the previous emit. ``start``: when the run began while its turn-start
        # is still to be committed; it counts as an emit, so that what the driver emits at once
        # is handed to that commit (see TurnManager.start_turn), not committed alone.
        self._last = 0.0 if start is None else start
        self._joins = start is not None  # until that commit, nothing here commits or wakes
        self._gap = float("inf")  # seconds from the emit before the previous one to the previous one

    def _commit(self) -> None:
        """Commit the part just added here, or hand it to the writer (see _INLINE_GAP)."""
        now = _monotonic()
        gap, self._gap = self._gap, now - self._last
        if self._joins and not self._buffer.committed:
            # The turn's start is not committed yet: StartTurn's thread commits it, with this
            # part, once it gets the GIL (or wakes the writer for what came after its commit).
            # Waking the writer now would race it for that commit and cost a wake-up either way.
            pass
        elif gap < _INLINE_GAP or self._gap < _INLINE_GAP:
            self._store.wake_writer()
        elif self._store.commit_here():
            now = _monotonic()
        self._last = now

    def emit(self, kind: str, step: Optional[int], attempt: int, fields: Dict[str, Any]) -> int:
        """See :meth:`TurnSink.emit <bridge_client.bridge.driver.TurnSink.emit>`."""
        turn = self._turn
        with turn.append_lock:
            if turn.abandoned:
                raise _Abandoned()
            index = turn.next_index
            text = part_text(kind, index, step, attempt, fields)
            try:
                pending = self._buffer.add(index, text, (step, attempt, kind), (), False)
            except StoreError:
                turn.abandoned = True
                raise _Abandoned() from None
            turn.next_index = index + 1
            if kind == "step-start" and step is not None:
                turn.max_attempt[step] = max(turn.max_attempt.get(step, 0), attempt)
        self._commit()
        if pending >= MAX_PENDING:
            wait_room(self._store, turn)
        return index

    def text_appender(self, kind: str, step: Optional[int], attempt: int) -> Callable[[str], int]:
        """Return a function that appends one ``{"text": t}`` part of ``kind`` in ``(step,
        attempt)`` and returns its index: :meth:`emit` for a fixed kind, step and attempt without
        the dict and the general encoding, the per-delta path of a streaming driver (one call,
        one lock, one format per part).

        The function raises ValueError for a lone surrogate (nothing is appended then), and
        _Abandoned when the turn's writes are refused."""
        # A part's text is head, index, tail, the JSON string, "}" (one f-string: cheaper
        # than concatenation or %-formatting).
        head = '{"type":"%s","index":' % kind
        tail = ',"step":%s,"attempt":%d,"text":' % ("null" if step is None else "%d" % step, attempt)
        meta: Meta = (step, attempt, kind)
        turn, buffer, store, sink = self._turn, self._buffer, self._store, self
        acquire, release = turn.append_lock.acquire, turn.append_lock.release
        encode, monotonic, gap_bound = _encode_str, _monotonic, _INLINE_GAP

        def append(text: str) -> int:
            if not text.isascii():
                _utf8_checked(text)
            acquire()
            try:  # PartBuffer.add and turn bookkeeping, inline: the per-part path
                if turn.abandoned:
                    raise _Abandoned()
                if store._broken:
                    turn.abandoned = True
                    raise _Abandoned()
                index = turn.next_index
                texts = buffer.texts
                if not texts:
                    buffer.first = index
                texts.append(f"{head}{index}{tail}{encode(text)}}}")
                buffer.metas.append(meta)
                turn.next_index = index + 1
                if not buffer.queued:
                    buffer.queued = True
                    store._enqueue(buffer, False)
                pending = len(texts)
            finally:
                release()
            # _commit, inline (see _INLINE_GAP).
            now = monotonic()
            before = sink._gap
            sink._gap = gap = now - sink._last
            if sink._joins and not buffer.committed:  # the start is still to be committed: see _commit
                pass
            elif gap < gap_bound or before < gap_bound:
                if store._writer_waiting:  # wake_writer's own test, without the call
                    store.wake_writer()
            elif store.commit_here():
                now = monotonic()
            sink._last = now
            if pending >= MAX_PENDING:
                wait_room(store, turn)
            return index

        return append

    def emit_texts(self, kind: str, step: int, attempt: int, texts: Sequence[str]) -> int:
        """Append several parts of one text kind (``text-delta`` or ``reasoning-delta``) at once,
        each ``{"text": t}``; return the index of the first. See
        :meth:`TurnSink.emit_texts <bridge_client.bridge.driver.TurnSink.emit_texts>`."""
        turn = self._turn
        meta: Meta = (step, attempt, kind)
        with turn.append_lock:
            if turn.abandoned:
                raise _Abandoned()
            first = turn.next_index
            encoded = text_parts(kind, first, step, attempt, texts)
            try:
                pending = self._buffer.add_many(first, encoded, [meta] * len(encoded), False)
            except StoreError:
                turn.abandoned = True
                raise _Abandoned() from None
            turn.next_index = first + len(encoded)
        self._commit()
        if pending >= MAX_PENDING:
            wait_room(self._store, turn)
        return first

    def next_attempt(self, step: int) -> int:
        """See :meth:`TurnSink.next_attempt <bridge_client.bridge.driver.TurnSink.next_attempt>`."""
        return self._turn.max_attempt.get(step, 0) + 1

    def finish_step(self, step: int, attempt: int, finish_reason: str, usage: Any) -> None:
        """See :meth:`TurnSink.finish_step <bridge_client.bridge.driver.TurnSink.finish_step>`."""
        self._finish_step(self._turn, step, attempt, finish_reason, usage)

    def set_state(self, data: Any, step: Optional[int], attempt: int) -> SessionState:
        """See :meth:`TurnSink.set_state <bridge_client.bridge.driver.TurnSink.set_state>`."""
        return self._set_state(self._turn, data, step, attempt)

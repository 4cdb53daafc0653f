"""The read side of a turn in the bridge: its committed log (:class:`Turn`), the ReadTurn
streams it pokes (:class:`Reader`), the Chunk bounds, and how far a log got (the basis of a
continue after a restart).

- Stored first: a part reaches a reader only through :meth:`Turn.publish_segment`, which the
  thread that committed it (the store's writer, or the emitting thread itself) calls after the
  commit; that thread then pokes the turn's ReadTurn streams, which send at once if they may.
- Turns outlive readers: readers read the in-memory committed log (:meth:`Turn.take`) from
  their own offsets, as many at once as like.
"""
from __future__ import annotations

import logging
import threading
from bisect import bisect_right
from itertools import accumulate
from typing import Callable, Dict, List, NamedTuple, Optional, Protocol, Sequence, Set, Tuple

from ..wire.parts import SessionState
from .approvals import TurnInteraction
from .context import TurnContext
from .store import Meta, PartBuffer, StoredPart
from .turn_life import TurnLife

__all__ = ["Turn", "Reader", "MAX_CHUNK_VALUES", "MAX_CHUNK_BYTES"]

log = logging.getLogger("bridge_client.bridge.turns")  # one logger for the turn runtime

MAX_CHUNK_VALUES = 4096
"""Parts per Chunk, at most (a Chunk carries what is committed and not yet sent: many parts
only when they wait, as when the driver is faster than the host reads). One Chunk is in flight
per stream: a larger one spreads the wait for its Ack (a thread wake on each side) over more
parts; it is the host's buffer bound (4096 values) too."""

MAX_CHUNK_BYTES = 256 * 1024
"""Characters of part JSON per Chunk, about (a single larger part still goes alone). A Chunk
larger than ``INLINE_BYTES`` is sent by the stream's own thread (a full 64 KiB Chunk already
was: the envelope and commas take it past the bound)."""


class Turn:
    """One turn's log and status.

    The committed log (``texts`` and their ``(step, attempt, type)``) grows only through
    :meth:`publish`, after the store committed the parts; readers wait on it with
    :meth:`wait_for_parts` and take chunks with :meth:`take`.

    Attributes:
        id, session_id, prompt: what the host gave.
        life: the turn's :class:`~bridge_client.bridge.turn_life.TurnLife` (new, running,
            orphan, finished, forcing, forced), moved only under the manager's lock.
        status: ``running`` (its thread runs), ``finished``, or ``orphan`` (unfinished and
            not running: left by a restart; the next StartTurn continues it): ``life.status``.
        checkpoint: the session state as of the last completed step (where a continue starts).
        cancelled: the driver's cancel event.
    """

    def __init__(
        self, turn_id: str, session_id: str, prompt: str, checkpoint: SessionState, status: str
    ) -> None:
        self.id = turn_id
        self.session_id = session_id
        self.prompt = prompt
        self.checkpoint = checkpoint
        self.life = TurnLife(status)
        self.cancelled = threading.Event()
        self.thread: Optional[threading.Thread] = None
        # Append side (the turn's thread, or an RPC thread before it starts): append_lock.
        self.append_lock = threading.Lock()
        self.next_index = 0
        self.buffer: Optional[PartBuffer] = None  # set by the manager: where appends go
        self.max_attempt: Dict[int, int] = {}
        # The driver's writes are refused (shutdown, a failed store, the cancel grace ran out):
        # a flag under append_lock, beside the life table (see turn_life).
        self.abandoned = False
        self.ctx: Optional[TurnContext] = None
        self.interaction: Optional[TurnInteraction] = None  # set by the manager
        # Committed side (published by the store's writer): _cond.
        self._cond = threading.Condition()
        # The ReadTurn streams of this turn (the server's): each is poked after every publish,
        # in the committing thread, so that it can send at once (see Reader).
        self.readers: "Set[Reader]" = set()
        self.texts: List[str] = []
        self.metas: List[Tuple[Optional[int], int, str]] = []
        self.discarded: Set[Tuple[Optional[int], int]] = set()
        self.complete = False

    @property
    def status(self) -> str:
        """``running``, ``orphan`` or ``finished`` (read under the manager's lock)."""
        return self.life.status

    @property
    def reported_status(self) -> str:
        """What ``StartTurn`` and ``CancelTurn`` answer: ``finished`` as soon as the turn's
        ``turn-finish`` is committed (a reader may have read it), although its thread may not
        have ended yet (the life table's ``end`` move comes after); else :attr:`status`."""
        return "finished" if self.complete else self.life.status

    @property
    def forced(self) -> bool:
        """The cancel grace ran out: the manager finished the turn itself; the driver's thread
        (still running, maybe) writes nothing more and changes no state."""
        return self.life.forced

    # ------------------------------------------------------------------ committed log

    def publish(self, parts: List[StoredPart]) -> None:
        """Add committed parts (read back from the store) and wake every reader."""
        metas: List[Meta] = [(p.step, p.attempt, p.type) for p in parts]
        self.publish_segment(
            [p.text for p in parts], metas, [m for m in metas if m[2] in ("step-reset", "turn-finish")]
        )

    def publish_segment(self, texts: List[str], metas: List[Meta], marks: List[Meta]) -> None:
        """Add committed parts (in the committing thread), wake every reader and poke the
        turn's streams.

        Args:
            texts: their JSON texts; metas: their ``(step, attempt, type)``; marks: the metas of
                the ``step-reset`` and ``turn-finish`` parts among them.
        """
        with self._cond:
            self.texts.extend(texts)
            self.metas.extend(metas)
            for step, attempt, kind in marks:
                if kind == "step-reset":
                    self.discarded.add((step, attempt))
                elif kind == "turn-finish":
                    self.complete = True
            self._cond.notify_all()
            readers = list(self.readers) if self.readers else None
        if readers:
            for reader in readers:
                try:
                    reader.poke()
                except Exception:  # a reader's bug must not stop the committing thread
                    log.exception("turn %s: waking a reader failed", self.id)

    def add_reader(self, reader: "Reader") -> None:
        """Poke ``reader`` after every publish from now on (until :meth:`remove_reader`)."""
        with self._cond:
            self.readers.add(reader)

    def remove_reader(self, reader: "Reader") -> None:
        """Stop poking ``reader``."""
        with self._cond:
            self.readers.discard(reader)

    def load(self, parts: List[StoredPart]) -> None:
        """Fill a turn read back from the store with its committed parts."""
        self.publish(parts)
        self.next_index = len(parts)
        for p in parts:
            if p.type == "step-start" and p.step is not None:
                self.max_attempt[p.step] = max(self.max_attempt.get(p.step, 0), p.attempt)

    def wake(self) -> None:
        """Wake every reader waiting on this turn (to notice an interrupt or a close)."""
        with self._cond:
            self._cond.notify_all()

    def wait_for_parts(self, position: int, stopped: Callable[[], bool]) -> None:
        """Block until the committed log holds a part at ``position``, the turn is complete, or
        ``stopped()`` is true (call :meth:`wake` after making it true)."""
        with self._cond:
            while len(self.texts) <= position and not self.complete and not stopped():
                self._cond.wait()

    def take(
        self,
        position: int,
        after_step: int = 0,
        max_values: int = MAX_CHUNK_VALUES,
        max_bytes: int = MAX_CHUNK_BYTES,
    ) -> Tuple[List[str], int, bool]:
        """Take the next committed parts a reader should get.

        Skips parts of steps below ``after_step`` and parts of attempts a ``step-reset``
        discarded (the ``step-reset`` itself is kept), as ReadTurn's ``afterStep`` says.

        Args:
            position: the index of the first part to look at.
            after_step: the first step wanted (0 = all).
            max_values, max_bytes: bounds of one Chunk (bytes: characters of JSON, about).

        Returns:
            ``(texts, new_position, done)``: the JSON texts to send (maybe none), where to go
            on, and whether the turn is complete and nothing is left after ``new_position``.
        """
        out: List[str] = []
        size = 0
        with self._cond:
            texts, metas, discarded = self.texts, self.metas, self.discarded
            n = len(texts)
            filtering = after_step > 0 or bool(discarded)
            if not filtering and position < n:
                # The common case, without a Python step per part: a slice, cut where it
                # reaches max_bytes (at least one part).
                out = texts[position : position + max_values]
                if len(out) > 1:
                    ends = list(accumulate(map(len, out)))
                    if ends[-1] > max_bytes:
                        out = out[: max(1, bisect_right(ends, max_bytes))]
                position += len(out)
                return out, position, self.complete and position >= n
            while position < n and len(out) < max_values:
                if filtering:
                    step, attempt, kind = metas[position]
                    if step is not None and (
                        step < after_step or (kind != "step-reset" and (step, attempt) in discarded)
                    ):
                        position += 1
                        continue
                text = texts[position]
                if out and size + len(text) > max_bytes:
                    break
                out.append(text)
                size += len(text)
                position += 1
            return out, position, self.complete and position >= n


class Reader(Protocol):
    """What :meth:`Turn.publish_segment` pokes: a ReadTurn stream of the server."""

    def poke(self) -> None:
        """New committed parts: send them now if the stream may (called in the committing
        thread, holding no lock of the turn or the store; must not block for long)."""
        ...


class _Progress(NamedTuple):
    """How far a turn's log got: the basis of a continue after a restart."""

    completed: int
    open_step: Optional[Tuple[int, int]]
    latest: Dict[int, int]


def _progress(
    metas: Sequence[Tuple[Optional[int], int, str]], discarded: Set[Tuple[Optional[int], int]]
) -> _Progress:
    """Find the completed steps (a step-finish of their latest attempt, in order from 0) and
    the step left open (a step-start of its latest attempt, no step-finish, no step-reset)."""
    latest: Dict[int, int] = {}
    finished: Set[Tuple[int, int]] = set()
    for step, attempt, kind in metas:
        if step is None:
            continue
        if kind == "step-start":
            latest[step] = max(latest.get(step, 0), attempt)
        elif kind == "step-finish":
            finished.add((step, attempt))
    completed = 0
    while completed in latest and (completed, latest[completed]) in finished:
        completed += 1
    open_step = None
    last = latest.get(completed)
    if last is not None and (completed, last) not in finished and (completed, last) not in discarded:
        open_step = (completed, last)
    return _Progress(completed, open_step, latest)

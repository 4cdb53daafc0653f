"""Sessions and turns inside the bridge: runs each turn in its own thread, appends its parts
to the store, wakes its readers, and continues turns a restart left unfinished.

- Stored first: a part reaches a reader only through :meth:`Turn.publish_segment`, which the
  thread that committed it (the store's writer, or the emitting thread itself) calls after the
  commit; that thread then pokes the turn's ReadTurn streams, which send at once if they may.
- Turns outlive readers: a turn runs in its thread whoever reads it; readers read the in-memory committed log
  (:meth:`Turn.take`) from their own offsets, as many at once as like.
- After a restart: :meth:`TurnManager.start_turn` on a turn that is in the store but unfinished and not
  running appends a ``step-reset`` for its unfinished step, resets the session state to the
  checkpoint of the last completed step, and runs the driver from there.

Lock order (never the other way round): ``TurnManager._lock`` → ``Turn.append_lock`` →
the store's lock. A committing thread (the store's writer, or one in
:meth:`~bridge_client.bridge.store.Store.commit_here`, which holds none of these) takes
``Turn.append_lock`` alone (to take the turn's buffered parts) and ``Turn._cond`` alone (to
publish), and pokes the streams holding neither.

Hot path: a driver's part is encoded once (:func:`~bridge_client.bridge.store.part_text`)
and that one string is the SQLite segment's content, the in-memory log's entry, and what
a Chunk carries; appending it takes the turn's lock only (no store lock, no object per part
beyond the string and its ``(step, attempt, type)``).
"""
from __future__ import annotations

import heapq
import json
import logging
import threading
import time
from collections import OrderedDict
from datetime import datetime, timezone
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Protocol, Sequence, Set, Tuple

from ..errors import ApprovalsUnsupported, MessagesUnsupported, Overloaded, RevisionExhausted
from ..errors import SessionNotFound, TurnConflict, TurnNotFound
from ..wire.parts import (
    FINISH_REASONS,
    MAX_OPEN_REVISION,
    MAX_SAFE_INTEGER,
    PROTOCOL_VERSION,
    Part,
    SessionState,
    TurnState,
    part_from_dict,
)
from .approvals import AlwaysAllowed, Append, TurnInteraction
from .driver import Driver, TurnContext, TurnResult
from .store import (
    MAX_PENDING,
    Meta,
    Op,
    PartBuffer,
    Store,
    StoredPart,
    StoreError,
    Ticket,
    checkpoint_op,
    finish_op,
    _encode_str,
    _utf8_checked,
    json_text,
    part_text,
    session_op,
    text_parts,
    turn_op,
)

__all__ = [
    "TurnManager",
    "Turn",
    "Session",
    "iso_now",
    "STEP_RESET_REASON",
    "MAX_CHUNK_VALUES",
    "MAX_CHUNK_BYTES",
    "CANCEL_GRACE",
    "MAX_RUNNING_TURNS",
]

log = logging.getLogger("bridge_client.bridge.turns")

STEP_RESET_REASON = "bridge restarted"
"""The ``reason`` of the ``step-reset`` the bridge writes when it continues a turn after a restart."""

MAX_CHUNK_VALUES = 256
"""Parts per Chunk, at most."""

MAX_CHUNK_BYTES = 256 * 1024
"""Characters of part JSON per Chunk, about (a single larger part still goes alone)."""

CANCEL_GRACE = 5.0
"""Seconds a driver has to end a cancelled turn; then the bridge ends it (``cancelled``),
abandons the driver's thread and kills the process groups it reported."""

MAX_RUNNING_TURNS = 256
"""Turns running at once, at most (each has a thread); beyond, ``StartTurn`` is ``Overloaded``."""

_MAX_CACHED_FINISHED = 32
"""Finished turns whose log stays in memory; older ones are read back from the store."""


def iso_now() -> str:
    """Return the current UTC time as ISO 8601 with milliseconds, e.g. ``2026-11-30T00:34:13.123Z``."""
    now = datetime.now(timezone.utc)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


_dumps = json_text
_monotonic = time.monotonic


def _same_json(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


class _Abandoned(BaseException):
    """Raised into a turn's thread when the bridge shuts down (or its store failed): the turn
    is left unfinished in the store, to be continued after a restart (B05). A BaseException
    so that a driver's ``except Exception`` does not swallow it."""


class Session:
    """A session as this bridge holds it (the store keeps a copy; revisions only grow).

    Attributes:
        id: the session id; revision, data: its state; closed: closed by ``CloseSession``.
        env: the environment the last ``OpenSession`` gave (names to values). Held in memory
            only, never in the store (values may be secrets): a restarted bridge has it again
            when the host opens the session on its new connection.
    """

    __slots__ = ("id", "revision", "data", "closed", "env", "approvals", "approval_timeout")

    def __init__(self, session_id: str, revision: int, data: Any, closed: bool = False) -> None:
        self.id = session_id
        self.revision = revision
        self.data = data
        self.closed = closed
        self.env: Dict[str, str] = {}
        # OpenSession's interactive settings: in memory, like env (every connection sends them).
        self.approvals = False
        self.approval_timeout: Optional[float] = None

    def state(self) -> SessionState:
        """Return the state as a :class:`SessionState` value."""
        return SessionState(self.id, self.revision, self.data)

    def op(self) -> Op:
        """Return the store op that writes this session."""
        return session_op(self.id, self.revision, self.data, self.closed)


class Turn:
    """One turn's log and status.

    The committed log (``texts`` and their ``(step, attempt, type)``) grows only through
    :meth:`publish`, after the store committed the parts; readers wait on it with
    :meth:`wait_for_parts` and take chunks with :meth:`take`.

    Attributes:
        id, session_id, prompt: what the host gave.
        status: ``running`` (its thread runs), ``finished``, or ``orphan`` (unfinished and
            not running: left by a restart; the next StartTurn continues it). Guarded by the
            manager's lock.
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
        self.status = status
        self.cancelled = threading.Event()
        self.thread: Optional[threading.Thread] = None
        # Append side (the turn's thread, or an RPC thread before it starts): append_lock.
        self.append_lock = threading.Lock()
        self.next_index = 0
        self.buffer: Optional[PartBuffer] = None  # set by the manager: where appends go
        self.max_attempt: Dict[int, int] = {}
        self.abandoned = False
        # The cancel grace ran out: the manager finished the turn itself; the driver's thread
        # (still running, maybe) writes nothing more and changes no status.
        self.forced = False
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
                # The common case, without a Python step per part: a slice, if it fits.
                out = texts[position : position + max_values]
                if len(out) == 1 or sum(map(len, out)) <= max_bytes:
                    position += len(out)
                    return out, position, self.complete and position >= n
                out = []
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
    """How far a turn's log got: the basis of a continue (B05)."""

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


def _outcome(result: Any) -> Tuple[str, Any, Optional[str]]:
    """Turn what ``run_turn`` returned into ``(finish_reason, usage, error)``."""
    if result is None:
        return "stop", None, None
    if isinstance(result, TurnResult):
        reason, usage, error = result
    elif isinstance(result, str):
        reason, usage, error = result, None, None
    else:
        return (
            "error",
            None,
            f"driver returned {type(result).__name__}; expected None, a finish reason or a TurnResult",
        )
    if reason not in FINISH_REASONS:
        return "error", usage, f"driver returned the unknown finish reason {reason!r}"
    if error is not None and not isinstance(error, str):
        error = str(error)
    return reason, usage, error


class _Launch(NamedTuple):
    """A turn's thread, started and waiting: ``box`` holds the thread, then the context once
    :meth:`TurnManager._launch` ran; ``ready`` lets it go (to run, or to end at once)."""

    ready: threading.Event
    box: List[Any]


def _check_room(session: Session) -> None:
    """Refuse a change that would take a session's revision past 2**53-1.

    Raises:
        RevisionExhausted: the revision is at the limit.
    """
    if session.revision >= MAX_SAFE_INTEGER:
        raise RevisionExhausted(
            f"session {session.id!r} is at revision {session.revision}, the largest JSON peers read "
            "exactly: it cannot change any more; start a new session",
            sessionId=session.id,
            revision=session.revision,
        )


_INLINE_GAP = 0.001
"""Seconds since a driver's previous part after which its part is committed in its own thread
(:meth:`~bridge_client.bridge.store.Store.commit_here`): a paced stream's lone delta goes to the
log and to its readers without a thread hand-off. A driver that emits faster hands its parts to
the store's writer, which commits what queued meanwhile together (group commit). Neither way
waits for company."""


class _Sink:
    """The :class:`~bridge_client.bridge.driver.TurnSink` of one run of a turn."""

    def __init__(self, manager: "TurnManager", turn: Turn) -> None:
        self._manager = manager
        self._turn = turn
        assert turn.buffer is not None
        self._buffer = turn.buffer
        self._store = manager._store
        self._last = 0.0  # monotonic end of the previous emit
        # emit_text's encoding of the (kind, step, attempt) it last saw: its head and tail.
        self._key: Tuple[str, Optional[int], int] = ("", None, 0)
        self._head = self._tail = ""
        self._meta: Meta = (None, 0, "")

    def _commit(self) -> None:
        """Commit the part just added here, or hand it to the writer (see _INLINE_GAP)."""
        now = _monotonic()
        if now - self._last < _INLINE_GAP:
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
            self._manager._wait_room(turn)
        return index

    def emit_text(self, kind: str, step: Optional[int], attempt: int, text: str) -> int:
        """Append one part of a text kind, ``{"text": text}``; return its index (the per-delta
        path of a streaming driver: :meth:`emit` without the dict and the general encoding).
        Raises ValueError for a lone surrogate (nothing is appended then)."""
        turn = self._turn
        key = (kind, step, attempt)
        if key != self._key:
            self._key = key
            self._head = '{"type":"%s","index":' % kind
            where = "null" if step is None else "%d" % step
            self._tail = ',"step":%s,"attempt":%d,"text":' % (where, attempt)
            self._meta = (step, attempt, kind)
        if not text.isascii():
            _utf8_checked(text)
        encoded = _encode_str(text)
        with turn.append_lock:
            if turn.abandoned:
                raise _Abandoned()
            index = turn.next_index
            try:
                pending = self._buffer.add(
                    index, self._head + str(index) + self._tail + encoded + "}", self._meta, (), False
                )
            except StoreError:
                turn.abandoned = True
                raise _Abandoned() from None
            turn.next_index = index + 1
        self._commit()
        if pending >= MAX_PENDING:
            self._manager._wait_room(turn)
        return index

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
            self._manager._wait_room(turn)
        return first

    def next_attempt(self, step: int) -> int:
        """See :meth:`TurnSink.next_attempt <bridge_client.bridge.driver.TurnSink.next_attempt>`."""
        return self._turn.max_attempt.get(step, 0) + 1

    def finish_step(self, step: int, attempt: int, finish_reason: str, usage: Any) -> None:
        """See :meth:`TurnSink.finish_step <bridge_client.bridge.driver.TurnSink.finish_step>`."""
        self._manager._finish_step(self._turn, step, attempt, finish_reason, usage)

    def set_state(self, data: Any, step: Optional[int], attempt: int) -> SessionState:
        """See :meth:`TurnSink.set_state <bridge_client.bridge.driver.TurnSink.set_state>`."""
        return self._manager._set_state(self._turn, data, step, attempt)


class TurnManager:
    """The bridge's sessions and turns: what the RPC handlers call.

    Args:
        store: the bridge's :class:`~bridge_client.bridge.store.Store`.
        driver: the agent.
        agent_id, bridge_id: carried in every ``turn-start``.
        on_running: called with the number of running turns whenever it changes (the idle
            watcher); called with a lock held, so it must only record and notify.
        commit_timeout: seconds an RPC waits for its writes to be committed.
        generation: the store's generation id, carried in every ``turn-start``.
        cancel_grace: seconds a driver has to end a cancelled turn before the bridge ends it.
        max_running: turns running at once, at most; beyond, ``StartTurn`` is ``Overloaded``.

    Every public method may be called from any thread.
    """

    def __init__(
        self,
        store: Store,
        driver: Driver,
        *,
        agent_id: str,
        bridge_id: str,
        on_running: Optional[Callable[[int], None]] = None,
        commit_timeout: float = 30.0,
        generation: Optional[str] = None,
        cancel_grace: float = CANCEL_GRACE,
        max_running: int = MAX_RUNNING_TURNS,
    ) -> None:
        self._store = store
        self._driver = driver
        self._agent_id = agent_id
        self._bridge_id = bridge_id
        self._on_running = on_running
        self._commit_timeout = commit_timeout
        self._generation = generation
        self.cancel_grace = cancel_grace
        self.max_running = max(1, max_running)
        # Cancelled turns' deadlines: (deadline, sequence, turn, its thread), a heap watched by
        # one thread started with the first cancel.
        self._grace_cond = threading.Condition(threading.Lock())
        self._grace: List[Tuple[float, int, Turn, threading.Thread]] = []
        self._grace_seq = 0
        self._grace_thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()
        self._sessions: Dict[str, Session] = {}
        self._turns: Dict[str, Turn] = {}
        self._finished: "OrderedDict[str, None]" = OrderedDict()
        self._running = 0
        self._closing = False
        self._always = AlwaysAllowed(store)

    # ------------------------------------------------------------------ RPCs

    def open_session(
        self,
        session_id: str,
        state: Optional[SessionState],
        env: Optional[Dict[str, str]] = None,
        interactive: Optional[Dict[str, Any]] = None,
    ) -> Dict[str, Any]:
        """``OpenSession``: keep whichever of the stored copy and ``state`` has the higher
        revision; a new session starts at revision 0 with the driver's initial data. Re-opens
        a closed session.

        ``env`` becomes the session's environment for the turns that start (or are
        continued) from now on, replacing what an earlier ``OpenSession`` gave; a running turn
        keeps the one it started with. It is held in memory only.

        Returns:
            The SessionState JSON object.

        ``interactive`` (``{"approvals", "approval_timeout"}``) is held like ``env``.

        Raises:
            RevisionExhausted: the bridge's own copy is above ``MAX_OPEN_REVISION`` (the host's
                is checked when the payload is decoded).
            ApprovalsUnsupported: approvals on, and the driver cannot ask.
        """
        approvals = bool(interactive and interactive.get("approvals"))
        if approvals and not getattr(self._driver, "supports_approvals", False):
            raise ApprovalsUnsupported(
                f"the {self._agent_id} agent cannot ask before it runs a tool: open the session "
                "with approvals off",
                sessionId=session_id,
            )
        with self._lock:
            self._check_open()
            session = self._get_session(session_id)
            if session is None:
                if state is not None:
                    session = Session(session_id, state.revision, state.data)
                else:
                    session = Session(session_id, 0, self._initial_data())
                self._sessions[session_id] = session
            else:
                if session.revision > MAX_OPEN_REVISION:
                    raise RevisionExhausted(
                        f"session {session_id!r} is at revision {session.revision}: too little "
                        "room to grow; start a new session",
                        sessionId=session_id,
                        revision=session.revision,
                    )
                if state is not None and state.revision > session.revision:
                    session.revision, session.data = state.revision, state.data
                session.closed = False
            session.env = dict(env or {})
            session.approvals = approvals
            session.approval_timeout = (interactive or {}).get("approval_timeout") if approvals else None
            ticket = self._store.submit(session.op())
            result = session.state().to_dict()
        self._store.wait(ticket, self._commit_timeout)
        return result

    def close_session(self, session_id: str) -> Dict[str, Any]:
        """``CloseSession``: mark the session closed (its turns keep running).

        Raises:
            SessionNotFound: no such session.
        """
        with self._lock:
            self._check_open()
            session = self._get_session(session_id)
            if session is None:
                raise SessionNotFound(f"no session {session_id!r}", sessionId=session_id)
            session.closed = True
            ticket = self._store.submit(session.op())
            result = session.state().to_dict()
        self._store.wait(ticket, self._commit_timeout)
        return result

    def start_turn(self, session_id: str, turn_id: str, prompt: str) -> Dict[str, Any]:
        """``StartTurn``: start a new turn, or report on (or continue, after a restart) an existing one.
        Sending it twice is harmless.

        Returns:
            ``{"turnId", "status"}``: ``started``, ``running``, ``continued`` or ``finished``.

        Raises:
            SessionNotFound: no such session, or it is closed.
            TurnConflict: the turn id is taken by another prompt or another session.
            Overloaded: ``max_running`` turns run already, or no thread can be started (nothing
                was written; send it again later).
        """
        with self._lock:
            self._check_open()
            session = self._get_session(session_id)
            if session is None:
                raise SessionNotFound(
                    f"no session {session_id!r}: open it with OpenSession", sessionId=session_id
                )
            turn = self._get_turn(turn_id)
            ticket: Optional[Ticket] = None
            if turn is None:
                # Only new turns need an open session: a turn that exists can always be
                # continued (C12), also after the host that started it released its session.
                if session.closed:
                    raise SessionNotFound(
                        f"session {session_id!r} is closed: open it again", sessionId=session_id
                    )
                ticket = self._create(session, turn_id, prompt)
                status = "started"
            elif turn.session_id != session_id:
                raise TurnConflict(f"turn {turn_id!r} belongs to another session", turnId=turn_id)
            elif turn.prompt != prompt:
                raise TurnConflict(f"turn {turn_id!r} was started with another prompt", turnId=turn_id)
            elif turn.status in ("running", "finished"):
                status = turn.status
            else:
                ticket = self._continue(turn, session)
                status = "continued"
            self._evict()
        if ticket is not None:
            self._store.wait(ticket, self._commit_timeout)
        return {"turnId": turn_id, "status": status}

    def find_turn(self, session_id: str, turn_id: str) -> Turn:
        """Find a turn for ``ReadTurn`` (reading it back from the store when needed).

        Raises:
            SessionNotFound: no such session. TurnNotFound: no such turn in that session.
        """
        with self._lock:
            if self._get_session(session_id) is None:
                raise SessionNotFound(f"no session {session_id!r}", sessionId=session_id)
            turn = self._get_turn(turn_id)
            if turn is None or turn.session_id != session_id:
                raise TurnNotFound(f"no turn {turn_id!r} in session {session_id!r}", turnId=turn_id)
            return turn

    def cancel_turn(self, session_id: str, turn_id: str) -> Dict[str, Any]:
        """``CancelTurn``: set the driver's cancel event; the turn ends with
        ``turn-finish{finishReason: "cancelled"}``. A turn a restart left unfinished is
        finished as cancelled at once. A driver that has not ended the turn within
        ``cancel_grace`` seconds is abandoned: the bridge writes the ``turn-finish`` itself,
        nothing the driver emits later reaches the log, and the process groups it reported
        (:func:`~bridge_client.bridge.driver.process_group_started`) are killed.

        Returns:
            ``{"turnId", "status"}``: ``running`` (it is stopping) or ``finished``.

        Raises:
            TurnNotFound: no such turn in that session.
        """
        ticket: Optional[Ticket] = None
        with self._lock:
            self._check_open()
            turn = self._get_turn(turn_id)
            if turn is None or turn.session_id != session_id:
                raise TurnNotFound(f"no turn {turn_id!r} in session {session_id!r}", turnId=turn_id)
            if turn.status == "running":
                turn.cancelled.set()
                if turn.interaction is not None:
                    turn.interaction.wake()  # a driver waiting for an answer denies it (cancel)
                if turn.thread is not None:
                    self._watch_grace(turn, turn.thread)
            elif turn.status == "orphan":
                session = self._get_session(session_id)
                self._reset_open_step(turn, session)
                ticket = self._finish_turn(turn, None, "cancelled", None, None)
                turn.status = "finished"
                self._finished[turn.id] = None
            status = turn.status
        if ticket is not None:
            self._store.wait(ticket, self._commit_timeout)
        return {"turnId": turn_id, "status": status}

    def answer_approval(
        self,
        session_id: str,
        turn_id: str,
        request_id: str,
        decision: str,
        message: Optional[str],
        by: str,
    ) -> Dict[str, Any]:
        """``AnswerApproval`` (see :mod:`~bridge_client.bridge.approvals`).

        Returns:
            The recorded answer ``{"requestId", "decision", "message", "by"}``.

        Raises:
            TurnNotFound, ApprovalNotFound, ApprovalExpired, ApprovalConflict.
        """
        _, interaction = self._interaction_of(session_id, turn_id)
        try:
            return interaction.answer(request_id, decision, message, by)
        except _Abandoned:
            raise RuntimeError("the bridge is shutting down") from None

    def send_message(self, session_id: str, turn_id: str, message_id: str, text: str) -> Dict[str, Any]:
        """``SendMessage``: record a user message for a turn (once per message id).

        Returns:
            ``{"messageId", "index"}``.

        Raises:
            TurnNotFound, MessagesUnsupported, TurnNotRunning, BadRequest.
        """
        if not getattr(self._driver, "supports_messages", False):
            raise MessagesUnsupported(
                f"the {self._agent_id} agent cannot take messages during a turn", turnId=turn_id
            )
        turn, interaction = self._interaction_of(session_id, turn_id)
        try:
            return interaction.send(message_id, text, self._appender(turn))
        except _Abandoned:
            raise RuntimeError("the bridge is shutting down") from None

    def _interaction_of(self, session_id: str, turn_id: str) -> Tuple[Turn, TurnInteraction]:
        with self._lock:
            self._check_open()
            turn = self._get_turn(turn_id)
            if turn is None or turn.session_id != session_id or turn.interaction is None:
                raise TurnNotFound(f"no turn {turn_id!r} in session {session_id!r}", turnId=turn_id)
            return turn, turn.interaction

    def _appender(self, turn: Turn) -> Append:
        def append(
            kind: str, step: Optional[int], attempt: int, fields: Dict[str, Any], extra: Sequence[Op]
        ) -> Tuple[int, Ticket]:
            return self._append(turn, kind, step, attempt, fields, extra)

        return append

    def _new_interaction(self, turn: Turn) -> TurnInteraction:
        def wait(ticket: Ticket) -> None:
            self._store.wait(ticket, self._commit_timeout)

        turn.interaction = TurnInteraction(turn.id, turn.session_id, self._always, wait)
        return turn.interaction

    @property
    def running(self) -> int:
        """How many turns run in this process now."""
        with self._lock:
            return self._running

    def close(self, timeout: float = 2.0) -> None:
        """Stop for shutdown: refuse new RPCs, leave running turns unfinished in the store
        (abandon their writes, set their cancel events so drivers stop; the next ``StartTurn``
        after a restart continues them), call the driver's ``close()``. Idempotent.

        Args:
            timeout: seconds to wait, in all, for turn threads to end.
        """
        with self._lock:
            if self._closing:
                return
            self._closing = True
            turns = [t for t in self._turns.values() if t.status == "running"]
        with self._grace_cond:
            self._grace.clear()
            self._grace_cond.notify_all()
        for turn in turns:
            with turn.append_lock:
                turn.abandoned = True
            turn.cancelled.set()
            if turn.interaction is not None:
                turn.interaction.wake()
        closer = getattr(self._driver, "close", None)
        if callable(closer):
            try:
                closer()
            except Exception:
                log.exception("driver close() failed")
        deadline = time.monotonic() + timeout
        for turn in turns:
            if turn.thread is not None:
                turn.thread.join(max(0.0, deadline - time.monotonic()))

    # ------------------------------------------------------------------ lookups (lock held)

    def _check_open(self) -> None:
        if self._closing:
            raise RuntimeError("the bridge is shutting down")

    def _get_session(self, session_id: str) -> Optional[Session]:
        session = self._sessions.get(session_id)
        if session is None:
            row = self._store.load_session(session_id)
            if row is not None:
                session = Session(row.session_id, row.revision, row.data, row.closed)
                self._sessions[session_id] = session
        return session

    def _get_turn(self, turn_id: str) -> Optional[Turn]:
        turn = self._turns.get(turn_id)
        if turn is not None:
            return turn
        row = self._store.load_turn(turn_id)
        if row is None:
            return None
        parts = self._store.load_parts(turn_id)
        finished = row.status == "finished" or (bool(parts) and parts[-1].type == "turn-finish")
        turn = Turn(
            row.turn_id,
            row.session_id,
            row.prompt,
            SessionState.from_dict(row.checkpoint),
            "finished" if finished else "orphan",
        )
        turn.load(parts)
        self._new_interaction(turn).load(parts, self._store.load_messages_taken(turn_id))
        turn.buffer = self._store.buffer(turn_id, turn, turn.append_lock, turn.next_index)
        self._turns[turn_id] = turn
        if finished:
            self._finished[turn_id] = None
        return turn

    def _evict(self) -> None:
        """Drop the oldest finished turns from memory (their logs stay in the store)."""
        while len(self._finished) > _MAX_CACHED_FINISHED:
            turn_id, _ = self._finished.popitem(last=False)
            turn = self._turns.get(turn_id)
            if turn is not None and not turn.complete:
                # Its turn-finish is not committed yet: keep it until it is.
                self._finished[turn_id] = None
                break
            self._turns.pop(turn_id, None)

    def _initial_data(self) -> Any:
        init = getattr(self._driver, "initial_state", None)
        data = init() if callable(init) else None
        return json.loads(_dumps(data))  # a JSON copy; raises TypeError for anything else

    # ------------------------------------------------------------------ writing a turn's log

    def _append(
        self,
        turn: Turn,
        kind: str,
        step: Optional[int],
        attempt: int,
        fields: Dict[str, Any],
        extra: Sequence[Op] = (),
        force: bool = False,
    ) -> Tuple[int, Ticket]:
        """Append one part (and ``extra`` ops, in the same transaction); return
        ``(index, ticket)``. Raises TypeError/ValueError (nothing written) for non-JSON fields,
        and _Abandoned when the bridge is shutting down. ``force``: the manager's own end of
        an abandoned turn (written although its driver may write no more)."""
        buffer = turn.buffer
        assert buffer is not None
        with turn.append_lock:
            if turn.abandoned and not force:
                raise _Abandoned()
            index = turn.next_index
            text = part_text(kind, index, step, attempt, fields)
            try:
                pending = buffer.add(index, text, (step, attempt, kind), extra)
            except StoreError:
                turn.abandoned = True
                raise _Abandoned() from None
            turn.next_index = index + 1
            if kind == "step-start" and step is not None:
                turn.max_attempt[step] = max(turn.max_attempt.get(step, 0), attempt)
        if pending >= MAX_PENDING:
            self._wait_room(turn)
        return index, buffer.ticket(index)

    def _wait_room(self, turn: Turn) -> None:
        """Back-pressure: wait until the writer took the turn's buffered parts (raises
        _Abandoned when the store failed or closed meanwhile). Called without the turn's lock."""
        assert turn.buffer is not None
        try:
            self._store.wait_room(turn.buffer)
        except StoreError:
            with turn.append_lock:
                turn.abandoned = True
            raise _Abandoned() from None

    def _finish_step(self, turn: Turn, step: int, attempt: int, finish_reason: str, usage: Any) -> None:
        with self._lock:
            session = self._sessions[turn.session_id]
            checkpoint = session.state()
            fields = {"finishReason": finish_reason, "usage": usage}
            ops: Tuple[Op, ...] = (checkpoint_op(turn.id, checkpoint.to_dict()),)
            if turn.interaction is not None:  # the user messages this step took are its for good
                ops += turn.interaction.finish_ops()
            self._append(turn, "step-finish", step, attempt, fields, ops)
            turn.checkpoint = checkpoint

    def _set_state(self, turn: Turn, data: Any, step: Optional[int], attempt: int) -> SessionState:
        data = json.loads(_dumps(data))  # check it is JSON, and keep a copy the driver cannot change
        with self._lock:
            session = self._sessions[turn.session_id]
            _check_room(session)
            state = SessionState(session.id, session.revision + 1, data)
            op = session_op(session.id, state.revision, data, session.closed)
            self._append(turn, "session-state", step, attempt, {"state": state.to_dict()}, (op,))
            session.revision, session.data = state.revision, data
            return state

    def _finish_turn(
        self,
        turn: Turn,
        open_step: Optional[Tuple[int, int]],
        reason: str,
        usage: Any,
        error: Optional[str],
        force: bool = False,
    ) -> Ticket:
        """Close a step left open, then append ``turn-finish`` with the turn's status."""
        if turn.interaction is not None:
            turn.interaction.finishing()  # no user-message may follow turn-finish
        if open_step is not None:
            self._append(
                turn,
                "step-finish",
                open_step[0],
                open_step[1],
                {"finishReason": reason, "usage": None},
                force=force,
            )
        fields = {"finishReason": reason, "usage": usage, "error": error}
        try:
            _dumps(usage)
        except (TypeError, ValueError):
            fields = {
                "finishReason": "error",
                "usage": None,
                "error": "driver returned usage that is not JSON",
            }
        ops = (finish_op(turn.id, fields),)
        return self._append(turn, "turn-finish", None, 1, fields, ops, force=force)[1]

    # ------------------------------------------------------------------ starting and continuing (lock held)

    def _create(self, session: Session, turn_id: str, prompt: str) -> Ticket:
        started_at = iso_now()
        turn_state = TurnState(
            PROTOCOL_VERSION,
            self._agent_id,
            self._bridge_id,
            session.id,
            turn_id,
            prompt,
            started_at,
            self._generation,
        ).to_dict()
        checkpoint = session.state()
        turn = Turn(turn_id, session.id, prompt, checkpoint, "running")
        self._new_interaction(turn)
        launch = self._spawn(turn)  # first: a turn that cannot run is not written (Overloaded)
        try:
            turn.buffer = self._store.buffer(turn_id, turn, turn.append_lock, 0)
            row = turn_op(turn_id, session.id, prompt, started_at, turn_state, checkpoint.to_dict())
            _, ticket = self._append(turn, "turn-start", None, 1, {"turn": turn_state}, (row,))
            self._turns[turn_id] = turn
            self._launch(turn, 0, [], checkpoint, launch)
        finally:
            launch.ready.set()  # the thread runs the turn, or (nothing launched) ends at once
        log.info("turn %s started (session %s)", turn_id, session.id)
        return ticket

    def _reset_open_step(self, turn: Turn, session: Optional[Session]) -> Tuple[_Progress, Optional[Ticket]]:
        """B05: discard the attempt a restart cut short (``step-reset``), and put the session
        state back to the turn's checkpoint as a new revision. Returns the progress and the
        last ticket (``None`` when nothing was written)."""
        with turn._cond:  # a consistent view of the committed log
            metas = list(turn.metas)
            texts = list(turn.texts)
            discarded = set(turn.discarded)
        progress = _progress(metas, discarded)
        ticket: Optional[Ticket] = None
        if progress.open_step is not None:
            step, attempt = progress.open_step
            ids = [
                json.loads(text).get("toolCallId")
                for (s, a, kind), text in zip(metas, texts)
                if kind == "tool-call" and (s, a) == (step, attempt)
            ]
            fields = {
                "discardedAttempt": attempt,
                "reason": STEP_RESET_REASON,
                "toolCallIds": [i for i in ids if i],
            }
            _, ticket = self._append(turn, "step-reset", step, attempt, fields)
            log.info("turn %s: step %d attempt %d discarded (%s)", turn.id, step, attempt, STEP_RESET_REASON)
        if session is not None and not _same_json(session.data, turn.checkpoint.data):
            _check_room(session)
            state = SessionState(session.id, session.revision + 1, turn.checkpoint.data)
            op = session_op(session.id, state.revision, state.data, session.closed)
            _, ticket = self._append(turn, "session-state", None, 1, {"state": state.to_dict()}, (op,))
            session.revision, session.data = state.revision, state.data
        return progress, ticket

    def _continue(self, turn: Turn, session: Session) -> Optional[Ticket]:
        launch = self._spawn(turn)
        try:
            return self._continue_with(turn, session, launch)
        finally:
            launch.ready.set()

    def _continue_with(self, turn: Turn, session: Session, launch: "_Launch") -> Optional[Ticket]:
        progress, ticket = self._reset_open_step(turn, session)
        steps: List[List[Part]] = []
        with turn._cond:
            pairs = list(zip(turn.metas, turn.texts))
        for number in range(progress.completed):
            attempt = progress.latest[number]
            steps.append(
                [part_from_dict(json.loads(t)) for (s, a, _), t in pairs if s == number and a == attempt]
            )
        self._launch(turn, progress.completed, steps, session.state(), launch)
        log.info("turn %s continued after %d complete step(s) (B05)", turn.id, progress.completed)
        return ticket

    def _spawn(self, turn: Turn) -> "_Launch":
        """Start the thread that will run ``turn`` (it waits for :meth:`_launch`), before
        anything is written or marked running (B09). Lock held.

        Raises:
            Overloaded: ``max_running`` turns run already, or the thread cannot be started.
        """
        if self._running >= self.max_running:
            raise Overloaded(
                f"{self._running} turns are running, the most this bridge runs at once: try again later",
                turnId=turn.id,
            )
        launch = _Launch(threading.Event(), [])
        thread = threading.Thread(
            target=self._run_launched, args=(turn, launch), name=f"bridge-turn-{turn.id}", daemon=True
        )
        try:
            thread.start()
        except RuntimeError as exc:  # "can't start new thread": out of tasks or memory
            log.warning("turn %s: cannot start its thread (%s): answered Overloaded", turn.id, exc)
            raise Overloaded(
                f"the bridge cannot start a thread now ({exc}): try again later", turnId=turn.id
            ) from None
        launch.box.append(thread)
        return launch

    def _run_launched(self, turn: Turn, launch: "_Launch") -> None:
        launch.ready.wait()
        if len(launch.box) > 1:  # (thread, ctx): _launch ran; else the start was given up
            self._run(turn, launch.box[1])

    def _launch(
        self, turn: Turn, completed: int, steps: List[List[Part]], state: SessionState, launch: "_Launch"
    ) -> None:
        session = self._sessions[turn.session_id]
        interaction = turn.interaction or self._new_interaction(turn)
        sink = interaction.begin_run(
            approvals=session.approvals,
            timeout=session.approval_timeout,
            cancelled=turn.cancelled,
            append=self._appender(turn),
        )
        ctx = TurnContext(
            prompt=turn.prompt,
            session_id=turn.session_id,
            turn_id=turn.id,
            state=state,
            completed_steps=completed,
            steps=steps,
            cancelled=turn.cancelled,
            sink=_Sink(self, turn),
            env=session.env,
            interactive=sink,
        )
        turn.status = "running"
        turn.ctx = ctx
        turn.thread = launch.box[0]
        self._running += 1
        launch.box.append(ctx)
        self._notify_running(self._running)

    # ------------------------------------------------------------------ the turn's thread

    def _run(self, turn: Turn, ctx: TurnContext) -> None:
        ctx.bind_thread()
        finished = False
        try:
            reason, usage, error = self._drive(turn, ctx)
            self._finish_turn(turn, ctx.close(), reason, usage, error)
            finished = True
            log.info("turn %s finished: %s%s", turn.id, reason, f" ({error})" if error else "")
        except _Abandoned:
            if turn.forced:
                log.info("turn %s: its abandoned driver thread ended; nothing it wrote was kept", turn.id)
            else:
                log.info("turn %s left unfinished: the bridge is shutting down", turn.id)
        except Exception:
            log.exception("turn %s: could not write its end", turn.id)
        finally:
            ctx.close()
            if turn.interaction is not None:
                turn.interaction.end_run()
            with self._lock:
                # A forced turn was finished and counted out by the manager (cancel grace).
                if not turn.forced:
                    turn.status = "finished" if finished else "orphan"
                    if finished:
                        self._finished[turn.id] = None
                    self._running -= 1
                    self._notify_running(self._running)

    def _drive(self, turn: Turn, ctx: TurnContext) -> Tuple[str, Any, Optional[str]]:
        try:
            with ctx.in_thread():  # child processes see the session's environment (C19)
                result = self._driver.run_turn(ctx)
        except _Abandoned:
            raise
        except Exception as exc:
            if turn.abandoned:
                raise _Abandoned() from None
            if ctx.cancelled.is_set():
                return "cancelled", None, None
            log.error("turn %s: the driver raised", turn.id, exc_info=True)
            return "error", None, f"{type(exc).__name__}: {exc}"
        if ctx.cancelled.is_set():
            return "cancelled", None, None
        return _outcome(result)

    # ------------------------------------------------------------------ the cancel grace

    def _watch_grace(self, turn: Turn, thread: threading.Thread) -> None:
        """Give a cancelled turn ``cancel_grace`` seconds (lock held)."""
        with self._grace_cond:
            self._grace_seq += 1
            deadline = time.monotonic() + self.cancel_grace
            heapq.heappush(self._grace, (deadline, self._grace_seq, turn, thread))
            self._grace_cond.notify_all()
            if self._grace_thread is None:
                watcher = threading.Thread(target=self._grace_loop, name="bridge-cancel-grace", daemon=True)
                try:
                    watcher.start()
                except RuntimeError as exc:
                    # No thread for the watcher now: the next cancel tries again; until then
                    # this turn gets only the cancel event (logged, never a failed RPC).
                    log.warning("cannot start the cancel-grace watcher (%s); will try again", exc)
                    return
                self._grace_thread = watcher

    def _grace_loop(self) -> None:
        while True:
            with self._grace_cond:
                while True:
                    if self._closing:
                        self._grace_thread = None
                        return
                    if not self._grace:
                        self._grace_thread = None  # nothing to watch: the next cancel starts one
                        return
                    wait = self._grace[0][0] - time.monotonic()
                    if wait <= 0:
                        _, _, turn, thread = heapq.heappop(self._grace)
                        break
                    self._grace_cond.wait(wait)
            try:
                self._abandon(turn, thread)
            except Exception:
                log.exception("turn %s: ending it after the cancel grace failed", turn.id)

    def _abandon(self, turn: Turn, thread: threading.Thread) -> None:
        """The cancel grace of ``turn`` ran out: if the same run still runs, end the turn as
        ``cancelled`` here, abandon the driver's thread and kill its reported process groups."""
        with self._lock:
            if self._closing or turn.status != "running" or turn.thread is not thread:
                return
            with turn.append_lock:
                if turn.abandoned:
                    return  # shutting down: left unfinished for a restart (B05)
                turn.abandoned = True  # from here no emit of the driver reaches the log
            turn.forced = True
            last = turn.next_index - 1
        buffer = turn.buffer
        assert buffer is not None
        self._store.wait(buffer.ticket(last), self._commit_timeout)  # the committed log is whole
        with self._lock:
            with turn._cond:
                progress = _progress(list(turn.metas), set(turn.discarded))
            ticket = self._finish_turn(turn, progress.open_step, "cancelled", None, None, force=True)
            turn.status = "finished"
            self._finished[turn.id] = None
            self._running -= 1
            self._notify_running(self._running)
        killed = turn.ctx.kill_process_groups() if turn.ctx is not None else []
        log.warning(
            "turn %s ignored its cancel for %g s: ended as cancelled, its driver thread abandoned%s",
            turn.id,
            self.cancel_grace,
            f", process groups {killed} killed" if killed else "",
        )
        self._store.wait(ticket, self._commit_timeout)

    def _notify_running(self, count: int) -> None:
        if self._on_running is not None:
            try:
                self._on_running(count)
            except Exception:
                log.exception("on_running failed")

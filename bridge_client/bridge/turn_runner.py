"""The turn runner of the bridge: starts a turn's thread (before anything is written), runs
the driver in it, writes the bridge's own parts (``turn-start``, ``step-finish`` with its
checkpoint, ``session-state``, ``turn-finish``), continues a turn a restart left unfinished
(``step-reset``, the session put back to the checkpoint), and ends a cancelled turn whose
driver ignored the cancel grace.

After a restart: :meth:`~bridge_client.bridge.turns.TurnManager.start_turn` on a turn that is
in the store but unfinished and not running appends a ``step-reset`` for its unfinished step,
resets the session state to the checkpoint of the last completed step, and runs the driver
from there.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from datetime import datetime, timezone
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from ..errors import Overloaded
from ..wire.parts import FINISH_REASONS, PROTOCOL_VERSION, Part, SessionState, TurnState, part_from_dict
from .approvals import AlwaysAllowed, Append, TurnInteraction
from .cancel_grace import GraceWatcher
from .driver import Driver, TurnContext, TurnResult
from .host_calls import configure as configure_host_calls
from .sessions import Session, SessionRegistry, _check_room
from .store import Op, Store, Ticket, checkpoint_op, finish_op, json_text, session_op, turn_op
from .turn_life import NEW, RUNNING, _Abandoned
from .turn_log import Turn, _progress, _Progress
from .turn_sink import RunSink, append_part, wait_room
from .turn_threads import TurnThreads, Worker

__all__ = ["TurnRunner", "iso_now", "STEP_RESET_REASON", "CANCEL_GRACE", "MAX_RUNNING_TURNS"]

log = logging.getLogger("bridge_client.bridge.turns")  # one logger for the turn runtime

STEP_RESET_REASON = "bridge restarted"
"""The ``reason`` of the ``step-reset`` the bridge writes when it continues a turn after a restart."""


CANCEL_GRACE = 5.0
"""Seconds a driver has to end a cancelled turn; then the bridge ends it (``cancelled``),
abandons the driver's thread and kills the process groups it reported."""

MAX_RUNNING_TURNS = 256
"""Turns running at once, at most (each has a thread); beyond, ``StartTurn`` is ``Overloaded``."""


def iso_now() -> str:
    """Return the current UTC time as ISO 8601 with milliseconds, e.g. ``2026-11-30T00:34:13.123Z``."""
    # isoformat, not strftime: a fifth of the time (strftime costs about 20 us here, on the
    # way to every new turn's answer).
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")[:-6] + "Z"


_dumps = json_text


def _same_json(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)



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
    """A turn's thread, reserved and waiting: ``box`` holds the thread, then the context once
    :meth:`TurnRunner._launch` ran; ``ready`` is set, and ``worker`` given its job, when it
    may go (to run, or to end at once): :meth:`TurnRunner._let_go`."""

    ready: threading.Event
    box: List[Any]
    worker: Worker
    running: threading.Event  # set by the turn's thread once it runs the turn


class TurnRunner(SessionRegistry):
    """Runs the turns of a bridge (the base of :class:`~bridge_client.bridge.turns.TurnManager`,
    whose docstring describes the arguments).

    Lock order (never the other way round): ``_lock`` → ``Turn.append_lock`` → the store's lock.
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
        super().__init__(store, driver, agent_id, commit_timeout)
        self._bridge_id = bridge_id
        self._on_running = on_running
        self._generation = generation
        self.cancel_grace = cancel_grace
        self.max_running = max(1, max_running)
        self._grace_watch = GraceWatcher(self._abandon)
        # A turn's thread: one that ran an earlier turn when one waits (no thread start on the
        # way to the first part), else a new one.
        self._threads = TurnThreads(self._run_job)
        self._turns: Dict[str, Turn] = {}
        self._finished: "OrderedDict[str, None]" = OrderedDict()
        self._running = 0
        self._always = AlwaysAllowed(store)

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
        """:func:`~bridge_client.bridge.turn_sink.append_part` into this bridge's store. While
        a new turn's start is not committed, the part waits for that commit (StartTurn's
        thread makes it, and wakes the writer for what is queued after it): waking the writer
        would race it (``RunSink._commit``).

        Whether that commit is done is looked at once the part is queued, as ``RunSink``
        does: looked at before, a commit that ended in between (its thread found nothing
        queued after it) left the part queued with no one woken for it."""
        appended = append_part(self._store, turn, kind, step, attempt, fields, extra, force, False)
        buffer = turn.buffer
        if buffer is None or buffer.committed > 0:
            self._store.wake_writer()
        return appended

    def _wait_room(self, turn: Turn) -> None:
        """:func:`~bridge_client.bridge.turn_sink.wait_room` on this bridge's store."""
        wait_room(self._store, turn)

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

    def _create(self, session: Session, turn_id: str, prompt: str) -> Tuple[Ticket, threading.Event]:
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
        turn = Turn(turn_id, session.id, prompt, checkpoint, NEW)
        self._new_interaction(turn)
        launch = self._spawn(turn)  # first: a turn that cannot run is not written (Overloaded)
        try:
            turn.buffer = self._store.buffer(turn_id, turn, turn.append_lock, 0)
            row = turn_op(turn_id, session.id, prompt, started_at, turn_state, checkpoint.to_dict())
            # Not committed yet: the writer, woken once the driver's thread is let go, commits
            # it with what the driver emits meanwhile (TurnManager.start_turn).
            _, ticket = append_part(self._store, turn, "turn-start", None, 1, {"turn": turn_state}, (row,),
                                    wake=False)
            self._turns[turn_id] = turn
            self._launch(turn, 0, [], checkpoint, launch, joins_start=True)
        finally:
            self._let_go(turn, launch)  # it runs the turn, or (nothing launched) ends at once
        return ticket, launch.running  # its log line is written once StartTurn is answered

    def _reset_open_step(self, turn: Turn, session: Optional[Session]) -> Tuple[_Progress, Optional[Ticket]]:
        """Discard the attempt a restart cut short (``step-reset``), and put the session
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
            self._let_go(turn, launch)

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
        log.info("turn %s continued after %d complete step(s)", turn.id, progress.completed)
        return ticket

    def _spawn(self, turn: Turn) -> "_Launch":
        """Start the thread that will run ``turn`` (it waits for :meth:`_launch`), before
        anything is written or marked running (the bound on running turns). Lock held.

        Raises:
            Overloaded: ``max_running`` turns run already, or the thread cannot be started.
        """
        if self._running >= self.max_running:
            raise Overloaded(
                f"{self._running} turns are running, the most this bridge runs at once: try again later",
                turnId=turn.id,
            )
        try:
            # Reserved now, given its job once the turn is written (_let_go): woken once.
            worker = self._threads.reserve(f"bridge-turn-{turn.id}")
        except RuntimeError as exc:  # "can't start new thread": out of tasks or memory
            log.warning("turn %s: cannot start its thread (%s): answered Overloaded", turn.id, exc)
            raise Overloaded(
                f"the bridge cannot start a thread now ({exc}): try again later", turnId=turn.id
            ) from None
        return _Launch(threading.Event(), [worker.thread], worker, threading.Event())

    def _let_go(self, turn: Turn, launch: "_Launch") -> None:
        launch.ready.set()
        self._threads.go(launch.worker, (turn, launch))

    def _run_job(self, job: Tuple[Turn, "_Launch"]) -> None:
        self._run_launched(*job)

    def _run_launched(self, turn: Turn, launch: "_Launch") -> None:
        launch.ready.wait()
        launch.running.set()  # StartTurn commits the turn-start now (with what the driver emits)
        if len(launch.box) > 1:  # (thread, ctx): _launch ran; else the start was given up
            self._run(turn, launch.box[1])

    def _launch(
        self,
        turn: Turn,
        completed: int,
        steps: List[List[Part]],
        state: SessionState,
        launch: "_Launch",
        joins_start: bool = False,
    ) -> None:
        """Make the run's context (``joins_start``: the turn-start is still to be committed,
        and what the driver emits at once is handed to that commit). Lock held."""
        session = self._sessions[turn.session_id]
        interaction = turn.interaction or self._new_interaction(turn)
        sink = interaction.begin_run(
            approvals=session.approvals,
            timeout=session.approval_timeout,
            cancelled=turn.cancelled,
            append=self._appender(turn),
        )
        configure_host_calls(interaction, session)
        ctx = TurnContext(
            prompt=turn.prompt,
            session_id=turn.session_id,
            turn_id=turn.id,
            state=state,
            completed_steps=completed,
            steps=steps,
            cancelled=turn.cancelled,
            sink=RunSink(
                turn, self._store, self._finish_step, self._set_state,
                time.monotonic() if joins_start else None,
            ),
            env=session.env,
            interactive=sink,
        )
        turn.life.move("launch")
        turn.ctx = ctx
        turn.thread = launch.box[0]
        self._running += 1
        launch.box.append(ctx)
        self._notify_running(self._running)

    # ------------------------------------------------------------------ the turn's thread

    def _run(self, turn: Turn, ctx: TurnContext) -> None:
        ctx.bind_thread()
        finished = False
        ticket: Optional[Ticket] = None
        try:
            reason, usage, error = self._drive(turn, ctx)
            ticket = self._finish_turn(turn, ctx.close(), reason, usage, error)
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
                    turn.life.move("end" if finished else "leave")
                    if finished:
                        self._finished[turn.id] = None
                    self._running -= 1
                    self._notify_running(self._running)
        if ticket is not None:
            self._tell_driver_finished(turn, ticket)

    def _tell_driver_finished(self, turn: Turn, ticket: Ticket) -> None:
        """Once ``turn``'s ``turn-finish`` (``ticket``) is committed, tell the driver, which
        may then drop what it kept for a step run again after a restart (its commands'
        records); never before: until then a bridge death runs the turn's last step again."""
        hook = getattr(self._driver, "turn_finished", None)
        if hook is None:
            return
        try:
            self._store.wait(ticket, self._commit_timeout)
            hook(turn.session_id, turn.id)
        except Exception:
            log.warning("turn %s: the driver's turn_finished failed", turn.id, exc_info=True)

    def _drive(self, turn: Turn, ctx: TurnContext) -> Tuple[str, Any, Optional[str]]:
        try:
            with ctx.in_thread():  # child processes see the session's environment
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

    def _abandon(self, turn: Turn, run: object) -> None:
        """The cancel grace of ``turn`` ran out: if the same run (``run``: its context) still
        runs, end the turn as ``cancelled`` here, abandon the driver's thread and kill its
        reported process groups. (A run is named by its context, not its thread: a thread
        runs one turn after another.)"""
        with self._lock:
            if self._closing or turn.life.state != RUNNING or turn.ctx is not run:
                return
            with turn.append_lock:
                if turn.abandoned:
                    return  # shutting down: left unfinished for a restart
                turn.abandoned = True  # from here no emit of the driver reaches the log
            turn.life.move("force")
            last = turn.next_index - 1
        buffer = turn.buffer
        assert buffer is not None
        self._store.wait(buffer.ticket(last), self._commit_timeout)  # the committed log is whole
        with self._lock:
            with turn._cond:
                progress = _progress(list(turn.metas), set(turn.discarded))
            ticket = self._finish_turn(turn, progress.open_step, "cancelled", None, None, force=True)
            turn.life.move("forced")
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
        self._tell_driver_finished(turn, ticket)  # waits for the commit first

    def _notify_running(self, count: int) -> None:
        if self._on_running is not None:
            try:
                self._on_running(count)
            except Exception:
                log.exception("on_running failed")


"""The :class:`TurnContext` a turn runs with: the turn's prompt and session state, the steps
already complete, the cancel event, and the methods a driver emits parts with.

Pure Python: no sockets, no store, no websockets. The bridge's turn runner builds one over a
:class:`~bridge_client.bridge.driver_types.TurnSink` per run of a turn. Drivers import it from
:mod:`bridge_client.bridge.driver`.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from ..wire.parts import APPROVAL_CHOICES, Part, SessionState, UserMessage
from . import step_moves
from .child_process import ProcessGroups, ReadOnlyEnv, bind_groups, bound_env, child_environ
from .driver_types import Decision, InteractiveSink, TurnSink
from .open_step import OpenStep

__all__ = ["TurnContext"]

_ALLOW_ONCE = Decision("allow-once", None, "policy")

_IDLE, _IN_STEP, _CLOSED = step_moves.IDLE, step_moves.IN_STEP, step_moves.CLOSED


class TurnContext:
    """What a turn runs with: its prompt, the session state, the steps already complete, a
    cancel event, and the methods that emit parts (see :doc:`protocol`, "Values").

    Built by the bridge, one per run of a turn; a driver never constructs one. Methods may be
    called from any thread of the driver (a lock orders them). Emitting in the wrong place
    (a text before ``start_step()``, a second ``start_step()`` without ``finish_step()``, any
    call after ``run_turn`` returned) raises ``RuntimeError`` and writes nothing.

    Attributes:
        prompt: the turn's prompt.
        session_id: the session's id, as the host picked it.
        turn_id: the turn's id, as the host picked it.
        completed_steps: how many steps are already complete (0 for a new turn; more when the
            bridge continues a turn after a restart). The next ``start_step()`` opens
            step number ``completed_steps``.
        steps: the parts of each completed step (its latest attempt), ``step-start`` to
            ``step-finish``, for drivers that rebuild their conversation from them.
        cancelled: set when the host cancels the turn, or when the bridge shuts down; stop
            promptly (wait on it rather than sleeping).
        env: the session's environment (names to values; a read-only view), as the host
            gave it when it last opened the session: what the agent and its processes must
            see besides the bridge's own environment. Values may be secrets: never log them,
            put them in argv, or store them in the session state. Start processes with
            :meth:`child_env` (or :func:`child_environ`), which merges it.
    """

    def __init__(
        self,
        *,
        prompt: str,
        session_id: str,
        turn_id: str,
        state: SessionState,
        completed_steps: int,
        steps: Sequence[Sequence[Part]],
        cancelled: threading.Event,
        sink: TurnSink,
        env: Optional[Mapping[str, str]] = None,
        interactive: Optional[InteractiveSink] = None,
    ) -> None:
        self._interactive = interactive
        self.prompt = prompt
        self._env: Dict[str, str] = dict(env or {})
        self.session_id = session_id
        self.turn_id = turn_id
        self.completed_steps = completed_steps
        self.steps: List[List[Part]] = [list(s) for s in steps]
        self.cancelled = cancelled
        self._sink = sink
        self._emit_texts: Optional[Callable[[str, int, int, Sequence[str]], int]] = getattr(
            sink, "emit_texts", None
        )
        self._lock = threading.Lock()
        self._state = state
        # The step machine's state (step_moves), and the open step's own data: ``_open`` is
        # set exactly while ``_phase`` is IN_STEP; only _move() changes either.
        self._phase = _IDLE
        self._open: Optional[OpenStep] = None
        self._next_step = completed_steps
        self._last_attempt = 1
        # Process groups the driver reported from this turn's thread (process_group_started).
        self._groups = ProcessGroups()

    # ------------------------------------------------------------------ read-only views

    @property
    def env(self) -> Mapping[str, str]:
        """The session's environment (a read-only view; see the class docstring)."""
        return ReadOnlyEnv(self._env)

    def child_env(self, extra: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
        """The environment for a child process of this turn: the bridge's own minus
        ``BRIDGE_CLIENT_*``, the session's :attr:`env` over it, then ``extra``.

        Returns:
            A new dict, for ``subprocess.Popen(env=...)``.
        """
        return child_environ(self._env, extra)

    @contextlib.contextmanager
    def in_thread(self) -> Iterator[None]:
        """Make this turn's environment the calling thread's :func:`session_env` while the
        block runs (the bridge does this around ``run_turn``; a driver does it in a helper
        thread of its own that starts processes)."""
        with bound_env(self._env):
            yield

    @property
    def approvals(self) -> bool:
        """Whether the session turned approvals on (``bool``; fixed for the run of the turn):
        then ask with :meth:`ask_approval` before running a tool."""
        return self._interactive is not None and self._interactive.approvals

    @property
    def state(self) -> SessionState:
        """The session state as this turn knows it, as of the last completed step or the
        turn's start, then whatever :meth:`set_state` stored."""
        return self._state

    @property
    def step(self) -> Optional[int]:
        """The number of the open step, or ``None`` outside a step."""
        open_step = self._open
        return open_step.step if open_step is not None else None

    @property
    def attempt(self) -> int:
        """The attempt of the open (or last) step, 1 or more when a step is run again."""
        open_step = self._open
        return open_step.attempt if open_step is not None else self._last_attempt

    # ------------------------------------------------------------------ the state machine

    def _move(self, action: str, name: str, opened: Optional[OpenStep] = None) -> None:
        """Check and apply one transition (:mod:`~bridge_client.bridge.step_moves`), with the
        step it opens (``start_step``); the caller holds ``self._lock``."""
        phase = step_moves.move(self._phase, action, name, self.step)
        if phase != self._phase:
            if self._open is not None:
                self._last_attempt = self._open.attempt
            self._open = opened if phase == _IN_STEP else None
            self._phase = phase

    def _check(self, action: str, name: str) -> Optional[OpenStep]:
        """Raise like :meth:`_move` would, without moving (used before a write that may fail).

        Returns:
            The open step, or ``None`` outside a step (for an action allowed there)."""
        step_moves.check(self._phase, action, name, self.step)
        return self._open

    def _in_step(self, name: str, action: str = "part") -> OpenStep:
        """:meth:`_check` for an action the table allows only inside a step: the open step."""
        step_moves.check(self._phase, action, name, self.step)
        open_step = self._open
        assert open_step is not None  # the table moves these actions from IN_STEP only
        return open_step

    # ------------------------------------------------------------------ emitting

    def start_step(self) -> int:
        """Open the next step: emit ``step-start``.

        Returns:
            The step number (``completed_steps`` for the first call, then one more each time).
            The step's attempt is 1, or one more than a discarded attempt of it.

        Raises:
            RuntimeError: a step is already open, or the turn is over.
        """
        with self._lock:
            self._check("start_step", "start_step")
            step = self._next_step
            attempt = self._sink.next_attempt(step)
            self._sink.emit("step-start", step, attempt, {})
            self._move("start_step", "start_step", OpenStep(step, attempt, self._sink))
            self._next_step = step + 1
            return step

    def _part(self, name: str, kind: str, fields: Dict[str, Any]) -> None:
        with self._lock:
            open_step = self._in_step(name)
            self._sink.emit(kind, open_step.step, open_step.attempt, fields)
            if kind == "tool-call":
                open_step.call_ids.append(fields["toolCallId"])

    def text(self, s: str) -> None:
        """Emit a ``text-delta`` (model text) in the open step.

        Raises:
            TypeError: ``s`` is not a str. ValueError: ``s`` holds a lone surrogate.
            RuntimeError: no step is open.
        """
        if type(s) is not str and not isinstance(s, str):
            raise TypeError(f"text() takes a str, got {type(s).__name__}")
        lock = self._lock
        lock.acquire()  # not ``with``: its __exit__ call is a good part of this path's cost
        try:
            open_step = self._open
            if open_step is None:
                self._move("part", "text")  # raises
                return
            append = open_step.append_text
            if append is not None:
                append(s)
                return
            self._sink.emit("text-delta", open_step.step, open_step.attempt, {"text": s})
        finally:
            lock.release()

    def texts(self, chunks: Sequence[str]) -> None:
        """Emit several ``text-delta`` parts in the open step, one per string, in order: the
        same parts as calling :meth:`text` for each, handed to the bridge's log at once (one
        lock, one hand-off to the store), for a driver that gets text in bursts.

        Args:
            chunks: the strings (an empty sequence emits nothing).

        Raises:
            TypeError: ``chunks`` is a str, or holds something else than str (nothing is
                emitted). ValueError: a string holds a lone surrogate (nothing is emitted).
            RuntimeError: no step is open.
        """
        if isinstance(chunks, str):
            raise TypeError("texts() takes a sequence of str; for one str call text()")
        items = list(chunks)
        for c in items:
            if type(c) is not str and not isinstance(c, str):
                raise TypeError(f"texts() takes str values, got {type(c).__name__}")
        with self._lock:
            open_step = self._in_step("texts")
            if not items:
                return
            if self._emit_texts is not None:
                self._emit_texts("text-delta", open_step.step, open_step.attempt, items)
                return
            for c in items:
                self._sink.emit("text-delta", open_step.step, open_step.attempt, {"text": c})

    def reasoning(self, s: str) -> None:
        """Emit a ``reasoning-delta`` in the open step.

        Raises:
            TypeError: ``s`` is not a str. ValueError: ``s`` holds a lone surrogate.
            RuntimeError: no step is open.
        """
        if not isinstance(s, str):
            raise TypeError(f"reasoning() takes a str, got {type(s).__name__}")
        lock = self._lock
        lock.acquire()  # text()'s path, for reasoning-delta
        try:
            open_step = self._in_step("reasoning")
            append = open_step.append_reasoning
            if append is not None:
                append(s)
                return
            self._sink.emit("reasoning-delta", open_step.step, open_step.attempt, {"text": s})
        finally:
            lock.release()

    def tool_call(self, tool_call_id: str, tool_name: str, input: Any) -> None:
        """Emit a ``tool-call`` in the open step.

        Args:
            tool_call_id: the call's id (listed in a ``step-reset`` if the step is run again).
            tool_name: the tool's name. input: the tool's JSON input.

        Raises:
            TypeError: an id or name is not a str, or ``input`` is not JSON.
            RuntimeError: no step is open.
        """
        _need_str(tool_call_id=tool_call_id, tool_name=tool_name)
        fields = {"toolCallId": tool_call_id, "toolName": tool_name, "input": input}
        self._part("tool_call", "tool-call", fields)

    def tool_result(self, tool_call_id: str, tool_name: str, output: Any, is_error: bool = False) -> None:
        """Emit a ``tool-result`` in the open step.

        Raises:
            TypeError: an id or name is not a str, or ``output`` is not JSON.
            RuntimeError: no step is open.
        """
        _need_str(tool_call_id=tool_call_id, tool_name=tool_name)
        self._part(
            "tool_result",
            "tool-result",
            {"toolCallId": tool_call_id, "toolName": tool_name, "output": output, "isError": bool(is_error)},
        )

    def data(self, name: str, value: Any) -> None:
        """Emit a driver-defined ``data`` part, inside or outside a step.

        Raises:
            TypeError: ``name`` is not a str, or ``value`` is not JSON. RuntimeError: turn over.
        """
        _need_str(name=name)
        with self._lock:
            open_step = self._check("data", "data")
            self._sink.emit(
                "data",
                open_step.step if open_step is not None else None,
                open_step.attempt if open_step is not None else 1,
                {"name": name, "data": value},
            )

    def finish_step(self, finish_reason: str = "stop", usage: Any = None) -> None:
        """Close the open step: emit ``step-finish`` and checkpoint the session state, so a
        restart continues after this step.

        Args:
            finish_reason: why the step ended (``stop``, ``tool-calls``, ... free text).
            usage: the step's JSON usage figures, or ``None``.

        Raises:
            TypeError: ``finish_reason`` is not a str or ``usage`` is not JSON.
            RuntimeError: no step is open.
        """
        _need_str(finish_reason=finish_reason)
        with self._lock:
            open_step = self._in_step("finish_step", "finish_step")
            self._sink.finish_step(open_step.step, open_step.attempt, finish_reason, usage)
            self._move("finish_step", "finish_step")

    def reset_step(self, reason: str) -> None:
        """Abandon the open attempt of the step: emit ``step-reset`` (:doc:`protocol`, "Values"), so
        readers drop its parts; the next :meth:`start_step` opens the same step again with its
        attempt raised. For a driver that must run a step again itself (a model stream cut
        mid-answer), as the bridge does after a restart.

        The session state is not touched: a driver that changed it inside the step puts it
        back itself.

        Args:
            reason: why, one line (e.g. ``"model stream cut"``).

        Raises:
            TypeError: ``reason`` is not a str. RuntimeError: no step is open.
        """
        _need_str(reason=reason)
        with self._lock:
            open_step = self._in_step("reset_step", "reset_step")
            fields = {
                "discardedAttempt": open_step.attempt,
                "reason": reason,
                "toolCallIds": list(open_step.call_ids),
            }
            self._sink.emit("step-reset", open_step.step, open_step.attempt, fields)
            self._move("reset_step", "reset_step")
            if self._interactive is not None:
                self._interactive.step_reset(open_step.step, open_step.attempt)
            self._next_step = open_step.step

    # ------------------------------------------------------------------ interactive turns

    def ask_approval(
        self,
        tool_call_id: str,
        tool_name: str,
        input: Any,
        *,
        choices: Sequence[str] = APPROVAL_CHOICES,
        title: Optional[str] = None,
    ) -> Decision:
        """Ask before running a tool, and wait for the answer.

        With approvals on, this emits an ``approval-request`` part (a new request id, naming
        this step's attempt) and blocks the calling thread until the request is answered:
        by the host, by an allow-always the session remembers for ``tool_name``, by the
        session's approval timeout (denied, ``by="timeout"``) or by a cancel of the turn
        (denied, ``by="cancel"``). The ``approval-answer`` part that records the decision is
        in the log before this returns, so a bridge that dies after it asks again in the
        step's next attempt. With approvals off it returns ``allow-once`` at once and emits
        nothing.

        Args:
            tool_call_id: the tool call it is about. tool_name: the tool's name (what an
                allow-always is remembered by). input: the tool's JSON input.
            choices: the decisions to offer, from ``allow-once``, ``allow-always``,
                ``deny``, in the order to show them.
            title: a one-line description for people (e.g. ``"shell: rm -rf build"``).

        Returns:
            A :class:`Decision`; ``decision.allowed`` says whether to run the tool.

        Raises:
            TypeError: an id or name is not a str, or ``input`` is not JSON.
            ValueError: ``choices`` is empty or holds another value.
            RuntimeError: no step is open, or the turn is over.
        """
        _need_str(tool_call_id=tool_call_id, tool_name=tool_name)
        if title is not None and not isinstance(title, str):
            raise TypeError(f"title must be a str or None, got {type(title).__name__}")
        offered = tuple(choices)
        if not offered or any(c not in APPROVAL_CHOICES for c in offered):
            raise ValueError(f"choices must be a non-empty subset of {', '.join(APPROVAL_CHOICES)}")
        with self._lock:
            open_step = self._in_step("ask_approval")
        sink = self._interactive
        if sink is None or not sink.approvals:
            return _ALLOW_ONCE
        return sink.ask(open_step.step, open_step.attempt, tool_call_id, tool_name, input, offered, title)

    def take_messages(self) -> List[UserMessage]:
        """The user messages added to this turn that this run has not taken yet, in the order
        the bridge recorded them (non-blocking; empty when there are none). Each message is
        handed out once per attempt of a step: a message taken in an attempt that was
        abandoned (the bridge restarted) is handed out again to the next one.

        Returns:
            :class:`~bridge_client.wire.parts.UserMessage` parts (``.message_id``, ``.text``).
        """
        sink = self._interactive
        return sink.take_messages() if sink is not None else []

    def wait_message(self, timeout: float) -> Optional[UserMessage]:
        """Wait up to ``timeout`` seconds for the next user message not yet taken (for a
        driver that feeds a CLI's stdin from a thread of its own).

        Returns:
            The message, or ``None`` when none came in time or the turn was cancelled.
        """
        sink = self._interactive
        if sink is None:
            self.cancelled.wait(max(0.0, timeout))
            return None
        return sink.wait_message(timeout)

    def set_state(self, data: Any) -> SessionState:
        """Store ``data`` as the session's new state (revision + 1) and emit ``session-state``.

        Args:
            data: the driver's JSON for the session (copied; later changes to it do nothing).

        Returns:
            The new :class:`SessionState`.

        Raises:
            TypeError: ``data`` is not JSON.
            ValueError: ``data`` is not JSON.
            RuntimeError: the turn is over.
        """
        with self._lock:
            open_step = self._check("set_state", "set_state")
            if open_step is None:
                state = self._sink.set_state(data, None, 1)
            else:
                state = self._sink.set_state(data, open_step.step, open_step.attempt)
            self._state = state
            return state

    # ------------------------------------------------------------------ used by the runner

    def bind_thread(self) -> None:
        """Make this context the current thread's turn (the runner calls it first thing in
        the turn's thread), so that :func:`process_group_started` records there."""
        bind_groups(self._groups)

    def kill_process_groups(self) -> List[int]:
        """SIGKILL every process group the driver reported and did not report ended (the
        bridge abandons the turn). Returns the groups signalled; from any thread."""
        return self._groups.kill_all()

    def close(self) -> Optional[Tuple[int, int]]:
        """End the context (the runner calls it once ``run_turn`` returned).

        Returns:
            ``(step, attempt)`` of a step the driver left open (the runner closes it), or
            ``None``. Every later call on the context raises ``RuntimeError``.
        """
        with self._lock:
            open_step = self._open
            self._phase, self._open = _CLOSED, None
            return (open_step.step, open_step.attempt) if open_step is not None else None


def _need_str(**values: Any) -> None:
    for name, value in values.items():
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a str, got {type(value).__name__}")


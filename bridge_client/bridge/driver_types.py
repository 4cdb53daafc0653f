"""The values and interfaces between a :class:`~bridge_client.bridge.context.TurnContext` and
the bridge's turn runner: how a turn ended (:class:`TurnResult`), an approval's answer
(:class:`Decision`), and where a context writes (:class:`TurnSink`) and asks
(:class:`InteractiveSink`). Drivers import these names from :mod:`bridge_client.bridge.driver`.
"""
from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional, Protocol, Tuple

from ..wire.parts import SessionState, UserMessage

__all__ = ["TurnResult", "Decision", "InteractiveSink", "TurnSink"]


class TurnResult(NamedTuple):
    """How a turn ended, when a driver wants to say more than a finish reason.

    Attributes:
        finish_reason: one of ``stop``, ``cancelled``, ``error``, ``max-steps``
            (``wire.parts.FINISH_REASONS``); anything else ends the turn with ``error``.
        usage: the driver's JSON usage figures for the whole turn, or ``None``.
        error: a one-line description when ``finish_reason`` is ``error``, else ``None``.
    """

    finish_reason: str = "stop"
    usage: Any = None
    error: Optional[str] = None


class Decision(NamedTuple):
    """The answer to :meth:`TurnContext.ask_approval`.

    Attributes:
        decision: ``allow-once``, ``allow-always`` or ``deny``.
        message: the answerer's words for the agent (why it was denied, say), or ``None``.
        by: who decided: ``host``, ``policy`` (the host's policy, or an allow-always the
            session remembers for that tool), ``timeout`` (nobody answered within the
            session's approval timeout: denied) or ``cancel`` (the turn was cancelled: denied).
    """

    decision: str
    message: Optional[str]
    by: str

    @property
    def allowed(self) -> bool:
        """True for ``allow-once`` and ``allow-always``: run the tool."""
        return self.decision != "deny"


class InteractiveSink(Protocol):
    """Where a :class:`TurnContext` asks for approvals and takes user messages: the bridge's
    turn runner implements it (``bridge_client.bridge.approvals``). A driver never calls it.
    Methods are called from the driver's threads without the context's lock."""

    approvals: bool

    def ask(
        self,
        step: int,
        attempt: int,
        tool_call_id: str,
        tool_name: str,
        input: Any,
        choices: Tuple[str, ...],
        title: Optional[str],
    ) -> Decision:
        """Record an ``approval-request`` and block until its answer is recorded."""
        ...

    def take_messages(self) -> List[UserMessage]:
        """The messages not yet handed to this attempt, in order (non-blocking)."""
        ...

    def wait_message(self, timeout: float) -> Optional[UserMessage]:
        """The next message not yet handed out, waiting up to ``timeout`` seconds."""
        ...

    def step_reset(self, step: int, attempt: int) -> None:
        """The attempt was abandoned: its requests expire, its messages are handed out again."""
        ...



class TurnSink(Protocol):
    """Where a :class:`TurnContext` writes: the bridge's turn runner implements it.

    Every method is called from the driver's thread, with the context's lock held.

    A sink may also have ``emit_texts(kind, step, attempt, texts) -> int``: append one
    ``{"text": t}`` part of ``kind`` per string, at once (:meth:`TurnContext.texts`); return
    the first index. Without it, :meth:`TurnContext.texts` calls :meth:`emit` once per string.
    And ``text_appender(kind, step, attempt) -> Callable[[str], int]``: a function that
    appends one ``{"text": t}`` part of ``kind`` in that step's attempt and returns its index
    (:meth:`TurnContext.text` and :meth:`TurnContext.reasoning` get one per step: the
    per-delta path of a model stream); without it, they call :meth:`emit`.
    """

    def emit(self, kind: str, step: Optional[int], attempt: int, fields: Dict[str, Any]) -> int:
        """Append a part to the turn's log; return its index. Raises TypeError/ValueError for
        fields JSON cannot carry (nothing is appended then)."""
        ...

    def next_attempt(self, step: int) -> int:
        """Return the attempt number the next ``step-start`` of ``step`` carries (1, or one
        more than any attempt of that step already in the log)."""
        ...

    def finish_step(self, step: int, attempt: int, finish_reason: str, usage: Any) -> None:
        """Append ``step-finish`` and checkpoint the session state with it, atomically, so a
        restart continues after this step."""
        ...

    def set_state(self, data: Any, step: Optional[int], attempt: int) -> SessionState:
        """Store ``data`` as the session's next revision and append a ``session-state`` part."""
        ...


"""Interactive turns inside the bridge: approval requests and their answers, user messages.

One :class:`TurnInteraction` per turn in memory, made with its :class:`~.turns.Turn` and
rebuilt from the turn's log when the turn is read back from the store. It is the
:class:`~bridge_client.bridge.driver.InteractiveSink` of the turn's run (``ask``,
``take_messages``, ``wait_message``) and answers the two RPCs (``AnswerApproval``,
``SendMessage``).

- Every request, answer and message is a part of the turn's log, committed before anything
  acts on it: a driver's ``ask_approval`` returns only once the answer part is committed, and
  a message is handed to the driver only once its part is.
- A request is *pending* while a run of this process waits for it, *answered* once an answer
  part is recorded, *expired* when its attempt was abandoned (a reset, a restart: a request
  read back from the log belongs to a run that is gone unless its step completed) or the run
  ended without an answer. Only a pending request takes an answer; an answered one takes the
  same decision again (idempotent) and refuses another (``ApprovalConflict``).
- Messages are handed out in log order, each once per attempt: ``taken`` counts the messages
  handed to this run, ``kept`` those the completed steps took (stored with each
  ``step-finish``); a run that starts, or a step attempt reset, goes back to ``kept``.

Lock order: the manager's lock, then :attr:`TurnInteraction._cond`, then the turn's append
lock and the store's locks (appends happen under ``_cond``, so that a decision and its part
are one act). :class:`AlwaysAllowed` has a lock of its own, taken last.
"""
from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from ..errors import ApprovalConflict, ApprovalExpired, ApprovalNotFound, BadRequest, TurnNotRunning
from ..wire.parts import UserMessage
from .driver_types import Decision
from .store import Op, Store, StoredPart, Ticket, allow_always_op, messages_taken_op

__all__ = ["TurnInteraction", "AlwaysAllowed", "Append", "INTERACTIVE_TYPES"]

Append = Callable[[str, Optional[int], int, Dict[str, Any], Sequence[Op]], Tuple[int, Ticket]]
"""Appends a part to the turn's log: ``(kind, step, attempt, fields, extra ops) -> (index,
ticket)``; raises what the manager's append raises (the bridge shutting down, say)."""

INTERACTIVE_TYPES = frozenset(("approval-request", "approval-answer", "user-message"))

_PENDING, _ANSWERED, _EXPIRED = "pending", "answered", "expired"

_RESTARTED = "its step's attempt was abandoned when the bridge restarted; the step asks again"
_RESET = "its step's attempt was abandoned; the step asks again"
_ENDED = "the turn's run ended before it was answered"
_FINISHED = "the turn finished before it was answered"


class AlwaysAllowed:
    """The tools each session allowed always (``allow-always``), in memory and in the store.

    Args:
        store: where they are kept (:meth:`Store.load_always` reads them back after a restart).
    """

    def __init__(self, store: Store) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._sessions: Dict[str, Set[str]] = {}

    def allowed(self, session_id: str, tool_name: str) -> bool:
        """True when the session allowed ``tool_name`` always."""
        with self._lock:
            tools = self._sessions.get(session_id)
            if tools is None:
                tools = self._sessions[session_id] = set(self._store.load_always(session_id))
            return tool_name in tools

    def remember(self, session_id: str, tool_name: str) -> Op:
        """Remember ``tool_name`` for the session in memory; return the op that stores it
        (the caller writes it with the answer part)."""
        with self._lock:
            tools = self._sessions.get(session_id)
            if tools is None:
                tools = self._sessions[session_id] = set(self._store.load_always(session_id))
            tools.add(tool_name)
        return allow_always_op(session_id, tool_name)


class _Request:
    __slots__ = (
        "id", "step", "attempt", "tool_name", "choices", "status", "answer", "ticket", "committed", "why"
    )

    def __init__(
        self, request_id: str, step: int, attempt: int, tool_name: str, choices: Sequence[str] = ()
    ) -> None:
        self.id = request_id
        self.choices = tuple(choices)  # what the agent offered (empty: not known, any)
        self.step = step
        self.attempt = attempt
        self.tool_name = tool_name
        self.status = _PENDING
        self.answer: Optional[Dict[str, Any]] = None
        self.ticket: Optional[Ticket] = None
        self.committed = False  # the answer part is committed
        self.why = ""  # why it expired


class _Message:
    __slots__ = ("id", "text", "index", "ticket", "committed")

    def __init__(self, message_id: str, text: str, index: int, ticket: Optional[Ticket]) -> None:
        self.id = message_id
        self.text = text
        self.index = index
        self.ticket = ticket
        self.committed = ticket is None


class TurnInteraction:
    """The approvals and messages of one turn (see the module docstring).

    Args:
        turn_id, session_id: the turn's.
        always: the bridge's :class:`AlwaysAllowed`.
        wait_commit: blocks until a ticket is committed (raises the store's errors).

    Before a run, :meth:`begin_run` says how (approvals on, the timeout, how to append);
    :meth:`end_run` after it. The RPC methods may be called from any thread at any time.
    """

    def __init__(
        self, turn_id: str, session_id: str, always: AlwaysAllowed, wait_commit: Callable[[Ticket], None]
    ) -> None:
        self.turn_id = turn_id
        self.session_id = session_id
        self._always = always
        self._wait_commit = wait_commit
        self._cond = threading.Condition(threading.Lock())
        self._requests: Dict[str, _Request] = {}
        self._messages: List[_Message] = []
        self._by_message: Dict[str, _Message] = {}
        self.kept = 0  # messages the completed steps took
        self.taken = 0  # messages handed to this run
        self._finished = False
        self._append: Optional[Append] = None
        self._cancelled: Optional[threading.Event] = None
        self._nonce = ""  # made at the first request: most turns ask none (a syscall less)
        self._count = 0
        self.approvals = False
        self.timeout: Optional[float] = None

    # ------------------------------------------------------------------ the turn's life

    def load(self, parts: Sequence[StoredPart], kept: int) -> None:
        """Rebuild from a turn's committed log (read back from the store): requests of
        attempts that did not complete are expired (their run is gone), messages are in order,
        ``kept`` of them taken by completed steps."""
        finished: Set[Tuple[Optional[int], int]] = set()
        for p in parts:
            if p.type == "step-finish":
                finished.add((p.step, p.attempt))
            elif p.type == "turn-finish":
                self._finished = True
        with self._cond:
            for p in parts:
                if p.type not in INTERACTIVE_TYPES:
                    continue
                value = json.loads(p.text)
                if p.type == "approval-request" and p.step is not None:
                    offered = value.get("choices")
                    rec = _Request(
                        str(value.get("requestId")),
                        p.step,
                        p.attempt,
                        str(value.get("toolName")),
                        [str(c) for c in offered] if isinstance(offered, list) else (),
                    )
                    self._requests[rec.id] = rec
                elif p.type == "approval-answer":
                    known = self._requests.get(str(value.get("requestId")))
                    if known is not None:
                        known.status, known.committed = _ANSWERED, True
                        known.answer = _answer_fields(value)
                elif p.type == "user-message":
                    msg = _Message(str(value.get("messageId")), str(value.get("text")), p.index, None)
                    self._messages.append(msg)
                    self._by_message[msg.id] = msg
            for rec in self._requests.values():
                if (rec.step, rec.attempt) not in finished:
                    rec.status, rec.why = _EXPIRED, _RESTARTED
                elif rec.status == _PENDING:
                    rec.status, rec.why = _EXPIRED, _ENDED
            self.kept = self.taken = min(kept, len(self._messages))

    def begin_run(
        self, *, approvals: bool, timeout: Optional[float], cancelled: threading.Event, append: Append
    ) -> "TurnInteraction":
        """A run of the turn starts (new, or continued): how it asks, where it appends.
        Returns ``self``, the run's :class:`~bridge_client.bridge.driver.InteractiveSink`."""
        with self._cond:
            self.approvals, self.timeout = approvals, timeout
            self._cancelled, self._append = cancelled, append
            self.taken = self.kept
        return self

    def end_run(self) -> None:
        """The run ended (its thread returned or was abandoned): requests still pending expire."""
        with self._cond:
            self._expire(lambda rec: rec.status == _PENDING, _ENDED)
            self._append = None
            self._cond.notify_all()

    def finishing(self) -> None:
        """The turn's ``turn-finish`` is about to be appended: from now on no message is
        accepted (none may follow ``turn-finish`` in the log) and pending requests expire."""
        with self._cond:
            self._finished = True
            self._expire(lambda rec: rec.status == _PENDING, _FINISHED)
            self._cond.notify_all()

    def wake(self) -> None:
        """Wake a driver waiting for an answer or a message (the turn was cancelled)."""
        with self._cond:
            self._cond.notify_all()

    def step_reset(self, step: int, attempt: int) -> None:
        """That attempt was abandoned: its requests expire, its messages are handed out again."""
        with self._cond:
            self._expire(lambda rec: (rec.step, rec.attempt) == (step, attempt), _RESET)
            self.taken = self.kept
            self._cond.notify_all()

    def finish_ops(self) -> Tuple[Op, ...]:
        """The op to write with a ``step-finish``: the messages taken so far are the completed
        steps' for good. Called with the manager's lock held."""
        with self._cond:
            self.kept = self.taken
            return (messages_taken_op(self.turn_id, self.taken),) if self._messages else ()

    def _expire(self, which: Callable[[_Request], bool], why: str) -> None:
        for rec in self._requests.values():
            if rec.status != _EXPIRED and which(rec):
                rec.status, rec.why = _EXPIRED, why

    # ------------------------------------------------------------------ the driver's side

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
        """See :meth:`InteractiveSink.ask <bridge_client.bridge.driver.InteractiveSink.ask>`:
        append the request, then wait until its answer part is committed."""
        with self._cond:
            append = self._append
            if append is None:
                raise RuntimeError("ask_approval() outside the turn's run")
            self._count += 1
            self._nonce = self._nonce or uuid.uuid4().hex[:8]
            rec = _Request(f"{step}.{attempt}.{self._count}-{self._nonce}", step, attempt, tool_name, choices)
            fields = {
                "requestId": rec.id,
                "toolCallId": tool_call_id,
                "toolName": tool_name,
                "input": input,
                "choices": list(choices),
                "title": title,
            }
            append("approval-request", step, attempt, fields, ())  # TypeError for non-JSON input
            self._requests[rec.id] = rec
            deadline = None if self.timeout is None else time.monotonic() + self.timeout
            if self._always.allowed(self.session_id, tool_name):
                self._record(rec, "allow-always", None, "policy", remember=False)
        while True:
            with self._cond:
                ticket = None
                while ticket is None:
                    if rec.status == _ANSWERED and rec.committed:
                        assert rec.answer is not None
                        answer = rec.answer
                        return Decision(answer["decision"], answer["message"], answer["by"])
                    if rec.status == _ANSWERED:
                        ticket = rec.ticket  # another thread commits it: wait for it too
                        break
                    if rec.status == _EXPIRED:
                        # The run is being abandoned (a reset from another thread of the driver).
                        return Decision("deny", None, "cancel")
                    cancelled = self._cancelled
                    if cancelled is not None and cancelled.is_set():
                        ticket = self._record(rec, "deny", None, "cancel")
                        break
                    wait = None if deadline is None else deadline - time.monotonic()
                    if wait is not None and wait <= 0:
                        ticket = self._record(rec, "deny", None, "timeout")
                        break
                    self._cond.wait(wait)
            self._commit(rec, ticket)

    def _record(
        self, rec: _Request, decision: str, message: Optional[str], by: str, remember: bool = True
    ) -> Optional[Ticket]:
        """Record the answer of a pending request: append its part (with the allow-always op
        when that is the decision, unless ``remember`` is False: the session's own remembered
        answer). ``_cond`` held. Returns the ticket to wait for."""
        append = self._append
        if append is None:
            raise RuntimeError("the turn's run ended")
        answer = {"requestId": rec.id, "decision": decision, "message": message, "by": by}
        extra: Tuple[Op, ...] = ()
        if decision == "allow-always" and remember:  # the host's, or the host's approve= policy
            extra = (self._always.remember(self.session_id, rec.tool_name),)
        _, ticket = append("approval-answer", rec.step, rec.attempt, dict(answer), extra)
        rec.status, rec.answer, rec.ticket = _ANSWERED, answer, ticket
        return ticket

    def _commit(self, rec: _Request, ticket: Optional[Ticket]) -> None:
        """Wait (without ``_cond``) for the answer part's commit; then the answer counts."""
        if ticket is not None:
            self._wait_commit(ticket)
        with self._cond:
            rec.committed = True
            self._cond.notify_all()

    def take_messages(self) -> List[UserMessage]:
        """See :meth:`InteractiveSink.take_messages
        <bridge_client.bridge.driver.InteractiveSink.take_messages>`."""
        with self._cond:
            return self._take(len(self._messages))

    def wait_message(self, timeout: float) -> Optional[UserMessage]:
        """See :meth:`InteractiveSink.wait_message
        <bridge_client.bridge.driver.InteractiveSink.wait_message>`."""
        deadline = time.monotonic() + max(0.0, timeout)
        with self._cond:
            while True:
                got = self._take(1)
                if got:
                    return got[0]
                cancelled = self._cancelled
                left = deadline - time.monotonic()
                if left <= 0 or (cancelled is not None and cancelled.is_set()):
                    return None
                self._cond.wait(left)

    def _take(self, most: int) -> List[UserMessage]:
        out: List[UserMessage] = []
        messages = self._messages
        while len(out) < most and self.taken < len(messages) and messages[self.taken].committed:
            msg = messages[self.taken]
            out.append(UserMessage(msg.index, None, 1, msg.id, msg.text))
            self.taken += 1
        return out

    # ------------------------------------------------------------------ the RPCs

    def answer(self, request_id: str, decision: str, message: Optional[str], by: str) -> Dict[str, Any]:
        """``AnswerApproval``: record the answer of a pending request (a run of this process
        waits for it), or return the one recorded when it is the same decision.

        Returns:
            The recorded answer ``{"requestId", "decision", "message", "by"}``, once committed.

        Raises:
            ApprovalNotFound, ApprovalExpired, ApprovalConflict: see the catalogue.
            BadRequest: ``decision`` is not one of the choices the request offered.
        """
        with self._cond:
            rec = self._requests.get(request_id)
            if rec is None:
                raise ApprovalNotFound(
                    f"turn {self.turn_id!r} has no approval request {request_id!r}",
                    turnId=self.turn_id,
                    requestId=request_id,
                )
            if rec.choices and decision not in rec.choices:
                # The driver could not carry it out (the agent did not offer it), and an
                # allow-always not offered must not be remembered for the tool.
                raise BadRequest(
                    f"approval request {request_id!r} offers {', '.join(rec.choices)}, not {decision}",
                    turnId=self.turn_id,
                    requestId=request_id,
                )
            if rec.status == _EXPIRED:
                raise ApprovalExpired(
                    f"approval request {request_id!r} can no longer be answered: {rec.why}",
                    turnId=self.turn_id,
                    requestId=request_id,
                    recorded=dict(rec.answer) if rec.answer else None,
                )
            if rec.status == _ANSWERED:
                assert rec.answer is not None
                recorded = dict(rec.answer)
                if recorded["by"] in ("timeout", "cancel"):
                    timed_out = recorded["by"] == "timeout"
                    reason = "nobody answered it in time" if timed_out else "the turn was cancelled"
                    raise ApprovalExpired(
                        f"approval request {request_id!r} was denied: {reason}",
                        turnId=self.turn_id,
                        requestId=request_id,
                        recorded=recorded,
                    )
                if recorded["decision"] != decision:
                    raise ApprovalConflict(
                        f"approval request {request_id!r} was answered {recorded['decision']} "
                        f"(by {recorded['by']}) before; that answer stands",
                        turnId=self.turn_id,
                        requestId=request_id,
                        recorded=recorded,
                    )
                ticket = None if rec.committed else rec.ticket
            else:
                ticket = self._record(rec, decision, message, by)
                recorded = dict(rec.answer or {})
        self._commit(rec, ticket)
        return recorded

    def send(self, message_id: str, text: str, append: Append) -> Dict[str, Any]:
        """``SendMessage``: record the message (once per id) as a ``user-message`` part.

        Returns:
            ``{"messageId", "index"}``, once the part is committed.

        Raises:
            BadRequest: the id was used with another text. TurnNotRunning: the turn finished.
        """
        with self._cond:
            msg = self._by_message.get(message_id)
            if msg is not None:
                if msg.text != text:
                    raise BadRequest(
                        f"message {message_id!r} was sent before with another text",
                        turnId=self.turn_id,
                        messageId=message_id,
                    )
            else:
                if self._finished:
                    raise TurnNotRunning(
                        f"turn {self.turn_id!r} finished: it takes no message", turnId=self.turn_id
                    )
                index, ticket = append("user-message", None, 1, {"messageId": message_id, "text": text}, ())
                msg = _Message(message_id, text, index, ticket)
                self._messages.append(msg)
                self._by_message[message_id] = msg
            ticket_to_wait = None if msg.committed else msg.ticket
        if ticket_to_wait is not None:
            self._wait_commit(ticket_to_wait)
        with self._cond:
            msg.committed = True
            self._cond.notify_all()
        return {"messageId": message_id, "index": msg.index}


def _answer_fields(value: Dict[str, Any]) -> Dict[str, Any]:
    return {
        "requestId": value.get("requestId"),
        "decision": value.get("decision"),
        "message": value.get("message"),
        "by": value.get("by"),
    }

"""The host's side of interactive turns: answering approval requests, the ``approve=``
policy, and user messages added to a running turn.

:class:`~bridge_client.client.turn.Turn` keeps one :class:`TurnApprovals` and calls it for
the parts it yields; ``Turn.approve``, ``Turn.deny`` and ``Turn.say`` send their requests
through :func:`answer` and :func:`say`. Both requests are idempotent in the bridge (by request
id, by message id), so they are sent again over a new connection after a drop, within the
session's resend window. See the *Interactive turns* guide (:doc:`interactive`).
"""
from __future__ import annotations

import logging
import uuid
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Protocol, Set, Tuple, Union

from ..errors import ApprovalConflict, ApprovalExpired, BadRequest, ProtocolError
from ..wire import rpcs
from ..wire.parts import APPROVAL_CHOICES, APPROVAL_DECIDERS, ApprovalAnswer, ApprovalRequest, Part
from ..wire.host_parts import HostToolCall
from ..wire.parts import StepReset, TurnFinish, TurnStart
from .host_calls import HostCallRunner

__all__ = ["RecordedAnswer", "TurnApprovals", "answer", "say", "policy_decision"]

log = logging.getLogger("bridge_client")

RequestRef = Union[ApprovalRequest, str]
"""An approval request, as its part or its request id."""


class Turn(Protocol):
    """What answering and messaging need of a :class:`~bridge_client.client.turn.Turn` (a
    Protocol, so that this module does not import the turn back)."""

    id: str
    _session_id: str

    def _call(self, rpc: rpcs.Rpc, payload: Any) -> Any: ...

    def _unyielded(self) -> List[Part]: ...


class RecordedAnswer(NamedTuple):
    """The answer the bridge recorded for an approval request (what ``Turn.approve`` and
    ``Turn.deny`` return): the first answer given, whoever gave it.

    Attributes:
        request_id: the request. decision: ``allow-once``, ``allow-always`` or ``deny``.
        message: the words given with it, or ``None``. by: ``host``, ``policy``,
            ``timeout`` or ``cancel``.
    """

    request_id: str
    decision: str
    message: Optional[str]
    by: str

    @property
    def allowed(self) -> bool:
        """True for ``allow-once`` and ``allow-always``."""
        return self.decision != "deny"

    @classmethod
    def from_dict(cls, value: Any) -> "RecordedAnswer":
        """Check the bridge's JSON answer ``{"requestId", "decision", "message", "by"}``.

        Raises:
            ProtocolError: not of that shape.
        """
        if not isinstance(value, dict):
            raise ProtocolError("AnswerApproval: the answer must be a JSON object")
        request_id, decision = value.get("requestId"), value.get("decision")
        message, by = value.get("message"), value.get("by")
        if (
            not isinstance(request_id, str)
            or decision not in APPROVAL_CHOICES
            or (message is not None and not isinstance(message, str))
            or by not in APPROVAL_DECIDERS
        ):
            raise ProtocolError(f"AnswerApproval: not a recorded answer: {value!r}"[:300])
        return cls(request_id, decision, message, by)


def request_id_of(request: RequestRef) -> str:
    """The request id of ``request`` (a part or an id).

    Raises:
        TypeError: neither an ``ApprovalRequest`` nor a ``str``.
    """
    if isinstance(request, ApprovalRequest):
        return request.request_id
    if isinstance(request, str):
        return request
    raise TypeError(
        f"request must be an ApprovalRequest or its request id (str), got {type(request).__name__}"
    )


def answer(
    turn: Turn, request: RequestRef, decision: str, message: Optional[str] = None, by: str = "host"
) -> RecordedAnswer:
    """Send ``AnswerApproval`` for ``request`` of ``turn`` and return the recorded answer.

    Raises:
        ApprovalConflict: the request was answered otherwise before (``.recorded``).
        ApprovalExpired: the request can no longer be answered. ApprovalNotFound: no such
            request. TurnNotFound, BridgeUnavailable, SessionReleased: as for any request.
        TypeError, ValueError: a bad argument (nothing is sent).
    """
    request_id = request_id_of(request)
    if decision not in APPROVAL_CHOICES:
        raise ValueError(f"decision must be one of {', '.join(APPROVAL_CHOICES)}")
    if message is not None and not isinstance(message, str):
        raise TypeError(f"message must be a str or None, got {type(message).__name__}")
    payload: Dict[str, Any] = {
        "sessionId": turn._session_id,
        "turnId": turn.id,
        "requestId": request_id,
        "decision": decision,
        "message": message,
    }
    if by != "host":
        payload["by"] = by
    rpcs.ANSWER_APPROVAL.decode_payload(payload)  # BadRequest here, before anything is sent
    value = turn._call(rpcs.ANSWER_APPROVAL, payload)
    return RecordedAnswer.from_dict(value)


def say(turn: Turn, text: str, message_id: Optional[str] = None) -> str:
    """Send ``SendMessage`` with ``text`` to ``turn``; return the message id.

    Raises:
        BadRequest: an empty text (or only white space), before anything is sent.
        TurnNotRunning, MessagesUnsupported, BadRequest, TurnNotFound, BridgeUnavailable,
        SessionReleased: see ``Turn.say``.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if not text.strip():
        raise BadRequest("text is empty (or only white space): a message needs some text")
    message_id = rpcs.check_id(message_id if message_id is not None else uuid.uuid4().hex, "message_id")
    payload = {"sessionId": turn._session_id, "turnId": turn.id, "messageId": message_id, "text": text}
    rpcs.SEND_MESSAGE.decode_payload(payload)
    value = turn._call(rpcs.SEND_MESSAGE, payload)
    if not isinstance(value, dict) or value.get("messageId") != message_id:
        raise ProtocolError(f"SendMessage: unexpected answer {value!r}"[:300])
    return message_id


def policy_decision(result: Any) -> Optional[Tuple[str, Optional[str]]]:
    """What an ``approve=`` policy returned, as ``(decision, message)``, or ``None`` (leave
    the request to the caller).

    Raises:
        TypeError: a value that is no decision.
    """
    if result is None:
        return None
    if result is True:
        return "allow-once", None
    if result is False:
        return "deny", None
    if isinstance(result, str):
        if result in APPROVAL_CHOICES:
            return result, None
        raise TypeError(f"approve= returned {result!r}; expected one of {', '.join(APPROVAL_CHOICES)}")
    decision = getattr(result, "decision", None)
    if isinstance(decision, str):  # a Decision, a RecordedAnswer, an ApprovalAnswer
        message = getattr(result, "message", None)
        return policy_decision((decision, message))
    if isinstance(result, tuple) and len(result) == 2:
        decision, message = result
        if decision is True:
            decision = "allow-once"
        elif decision is False:
            decision = "deny"
        if decision in APPROVAL_CHOICES and (message is None or isinstance(message, str)):
            return decision, message
    raise TypeError(
        f"approve= returned {type(result).__name__}; expected True, False, None, a decision "
        f"({', '.join(APPROVAL_CHOICES)}) or a (decision, message) pair"
    )


class TurnApprovals:
    """The approval requests of one turn as its reader saw them: pending until an answer part
    (or a ``step-reset`` of their attempt, or ``turn-finish``) was yielded.

    Args:
        policy: the session's ``approve=`` callable, or ``None``.

    :meth:`seen` is idempotent (the reader may account a part twice after an interrupt).
    """

    def __init__(
        self, policy: Optional[Callable[[ApprovalRequest], Any]], tools: Tuple[Any, ...] = ()
    ) -> None:
        self.policy = policy
        self.pending: Dict[str, ApprovalRequest] = {}
        self.due: List[Any] = []  # yielded, waiting for the policy (or host tool calls to run)
        self._asked: Set[str] = set()  # handed to the policy already
        self.host = HostCallRunner(tuple(tools)) if tools else None

    def seen(self, part: Part) -> None:
        """Account a part the reader is about to yield."""
        host = self.host
        if host is not None and host.wants(part):
            if all(p is not part for p in self.due):
                self.due.append(part)
        if isinstance(part, ApprovalRequest):
            if part.request_id not in self.pending:
                self.pending[part.request_id] = part
            if self.policy is not None and part.request_id not in self._asked:
                if all(r.request_id != part.request_id for r in self.due):
                    self.due.append(part)
        elif isinstance(part, ApprovalAnswer):
            self.pending.pop(part.request_id, None)
        elif isinstance(part, StepReset):
            dropped = (part.step, part.discarded_attempt)
            for rid in [rid for rid, r in self.pending.items() if (r.step, r.attempt) == dropped]:
                del self.pending[rid]
        elif isinstance(part, TurnFinish) or (isinstance(part, TurnStart) and part.index == 0):
            self.pending.clear()  # the turn ended, or runs again from its prompt: nothing pending

    def run_policy(self, turn: Turn) -> None:
        """Call the policy for each request yielded since the last call, and send its answer.
        An answer the bridge refuses because the request was answered (by the caller) or
        expired meanwhile is logged, not raised.

        A policy that raises (or returns no decision: ``TypeError``) decides nothing: its
        exception comes out here, in the reading thread, as it is, with a note (PEP 678) that
        the request is still pending and how to answer it; the request stays pending, and the
        policy is not asked about it again."""
        policy = self.policy
        while self.due:
            request = self.due[0]
            if isinstance(request, HostToolCall):
                assert self.host is not None
                self.host.run(turn, request)  # raises before it ran: run again on the next read
                del self.due[0]
                continue
            self._asked.add(request.request_id)
            del self.due[0]
            if policy is None or request.request_id not in self.pending or _answered_ahead(turn, request):
                continue
            try:
                decided = policy_decision(policy(request))
            except Exception as exc:
                _note_pending(exc, request)
                raise
            if decided is None:
                continue
            try:
                answer(turn, request, decided[0], decided[1], by="policy")
            except (ApprovalConflict, ApprovalExpired) as exc:
                log.debug(
                    "turn %s: the policy's answer to %s was not used: %s", turn.id, request.request_id, exc
                )


def _note_pending(exc: Exception, request: ApprovalRequest) -> None:
    """Add to ``exc`` (a policy's exception) the note that ``request`` is still pending: shown
    under its traceback on Python 3.11+, kept in ``exc.__notes__`` before that."""
    note = (
        f"bridge_client: the approve= policy decided nothing for request {request.request_id} "
        f"({request.tool_name}): it is still pending. Answer it with turn.approve(request) or "
        "turn.deny(request) (or from another host); reading on does not ask the policy again"
    )
    log.debug("%s (%s: %s)", note, type(exc).__name__, exc)
    try:
        add_note = getattr(exc, "add_note", None)
        if add_note is not None:
            add_note(note)
        else:  # before Python 3.11: the same attribute, which traceback does not show yet
            notes = getattr(exc, "__notes__", None)
            if isinstance(notes, list):
                notes.append(note)
            else:
                exc.__notes__ = [note]
    except Exception:  # noqa: BLE001  an exception that takes no attributes keeps its own text
        pass


def _answered_ahead(turn: Turn, request: ApprovalRequest) -> bool:
    """True when the parts received and not yet yielded hold the request's answer (a turn read
    again from its start, say): the policy is not asked about a request already decided."""
    rid = request.request_id
    return any(isinstance(p, ApprovalAnswer) and p.request_id == rid for p in turn._unyielded())

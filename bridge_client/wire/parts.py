"""The values that ride inside the envelope: parts, turn and session states, payloads.

See :doc:`protocol`, "Values" and "Catalogue". Every type is a frozen dataclass with slots and
camelCase JSON: ``to_dict``/``from_dict``, ``to_json``/``from_json``, and ``schema()`` (a
marshmallow schema made by dataclasses-json).

Decoding from the wire goes through hand-written ``from_dict`` methods that check every
field and raise :class:`~bridge_client.errors.ProtocolError` naming it: dataclasses-json's own
``from_dict`` is lenient about types and builds ~16,000 objects per second, too slow for a
stream of parts. dataclasses-json (and marshmallow) are imported only when a schema is
asked for (:mod:`._schema`): neither the bridge nor a reading host loads them.

A new part type is a frozen dataclass under ``@_part(type, *fields)`` (see the existing ones):
the decorator gives it slots and registers it.

This module is the wire values' public home: the states and RPC results (:mod:`.values`), the
base class (:mod:`.slotted`) and the field checks (:mod:`.decode`) live apart and are
re-exported here.
"""

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Dict, List, Mapping, Optional, Tuple, Type, TypeVar

from ..errors import ProtocolError
from .decode import MAX_OPEN_REVISION, MAX_SAFE_INTEGER, REVISION_HEADROOM
from .decode import _any, _bool, _Decoder, _get, _int, _opt_int, _opt_str, _str, _str_list
from .slotted import _JSON_VALUE, _json_text, _maker, _slotted, _Value
from .values import PROTOCOL_VERSION, TURN_STATUSES, HelloResult, SessionState, StartTurnResult, TurnState

__all__ = [
    "PROTOCOL_VERSION",
    "MAX_SAFE_INTEGER",
    "MAX_OPEN_REVISION",
    "REVISION_HEADROOM",
    "FINISH_REASONS",
    "TURN_STATUSES",
    "SessionState",
    "TurnState",
    "HelloResult",
    "StartTurnResult",
    "Part",
    "TurnStart",
    "StepStart",
    "TextDelta",
    "ReasoningDelta",
    "ToolCall",
    "ToolResult",
    "StepFinish",
    "StepReset",
    "SessionStateChanged",
    "Data",
    "TurnFinish",
    "ApprovalRequest",
    "ApprovalAnswer",
    "UserMessage",
    "APPROVAL_CHOICES",
    "APPROVAL_DECIDERS",
    "PART_TYPES",
    "part_from_dict",
]

FINISH_REASONS = ("stop", "cancelled", "error", "max-steps")
"""The ``finishReason`` values of ``turn-finish`` (see :doc:`protocol`, "Values")."""

T = TypeVar("T")


# ----------------------------------------------------------------------------- parts


def _finish_reason(d: Mapping[str, Any], key: str, where: str) -> str:
    value = _str(d, key, where)
    if where == "turn-finish" and value not in FINISH_REASONS:
        raise ProtocolError(f"turn-finish.finishReason must be one of {', '.join(FINISH_REASONS)}")
    return value


def _turn_state(d: Mapping[str, Any], key: str, where: str) -> TurnState:
    return TurnState.from_dict(_get(d, key, where))


def _session_state(d: Mapping[str, Any], key: str, where: str) -> SessionState:
    return SessionState.from_dict(_get(d, key, where))


def _encode_field(value: Any) -> Any:
    if isinstance(value, (TurnState, SessionState)):
        return value.to_dict()
    if isinstance(value, tuple):
        return list(value)
    return value


@_slotted
@dataclass(frozen=True)
class Part(_Value):
    """One element of a turn's stream (see :doc:`protocol`, "Values").

    Attributes:
        index: the part's offset in the turn's log (0-based, never reused).
        step: the step number (0-based), or ``None`` for turn-level parts.
        attempt: which run of that step this is (1 for the first).

    Subclasses set ``type`` (the wire name) and add their own fields.
    """

    type: ClassVar[str] = ""
    _fields: ClassVar[Tuple[Tuple[str, str, _Decoder], ...]] = ()

    index: int
    step: Optional[int]
    attempt: int

    def to_dict(self, encode_json: bool = False) -> Dict[str, Any]:
        """Return the part as its wire JSON object (``type``, ``index``, ``step``, ...)."""
        out: Dict[str, Any] = {
            "type": self.type, "index": self.index, "step": self.step, "attempt": self.attempt
        }
        for attr, key, _ in self._fields:
            out[key] = _encode_field(getattr(self, attr))
        return out

    @classmethod
    def from_dict(cls, kvs: Any, *, infer_missing: bool = False) -> "Part":
        """Check a wire JSON object and build the matching subclass.

        Raises:
            ProtocolError: unknown ``type``, a field missing or of the wrong type, or (called
                on a subclass) a part of another type.
        """
        part = part_from_dict(kvs)
        if not isinstance(part, cls):
            raise ProtocolError(f"expected a {cls.type or 'part'} part, got {part.type}")
        return part


def _part(type_name: str, *fields: Tuple[str, str, _Decoder]) -> Callable[[Type[T]], Type[T]]:
    """Register a part class (a frozen dataclass deriving from :class:`Part`) under its wire
    ``type_name``, with its fields as ``(attribute, JSON key, decoder)``; gives it slots."""

    def register(cls: Type[T]) -> Type[T]:
        cls = _slotted(cls)
        cls.type = type_name  # type: ignore[attr-defined]
        cls._fields = fields  # type: ignore[attr-defined]
        PART_TYPES[type_name] = cls  # type: ignore[assignment]
        _MAKERS[type_name] = _maker(cls)  # type: ignore[arg-type]
        return cls

    return register


PART_TYPES: Dict[str, Type[Part]] = {}
"""Wire ``type`` name to Part subclass."""
_MAKERS: Dict[str, Callable[..., Part]] = {}  # the same, to a builder of checked values (_maker)


@_part("turn-start", ("turn", "turn", _turn_state))
@dataclass(frozen=True)
class TurnStart(Part):
    """Always index 0: carries the :class:`TurnState`, enough for any host to continue the turn."""

    turn: TurnState


@_part("step-start")
@dataclass(frozen=True)
class StepStart(Part):
    """A step (or a new attempt of it, ``attempt`` > 1) begins."""


@_part("text-delta", ("text", "text", _str))
@dataclass(frozen=True)
class TextDelta(Part):
    """Model text."""

    text: str


@_part("reasoning-delta", ("text", "text", _str))
@dataclass(frozen=True)
class ReasoningDelta(Part):
    """Model reasoning."""

    text: str


@_part(
    "tool-call",
    ("tool_call_id", "toolCallId", _str),
    ("tool_name", "toolName", _str),
    ("input", "input", _any),
)
@dataclass(frozen=True)
class ToolCall(Part):
    """The agent calls a tool; ``input`` is the tool's JSON input."""

    tool_call_id: str
    tool_name: str
    input: Any = field(metadata=_JSON_VALUE)


@_part(
    "tool-result",
    ("tool_call_id", "toolCallId", _str),
    ("tool_name", "toolName", _str),
    ("output", "output", _any),
    ("is_error", "isError", _bool),
)
@dataclass(frozen=True)
class ToolResult(Part):
    """The tool's answer; ``is_error`` says whether the tool failed."""

    tool_call_id: str
    tool_name: str
    output: Any = field(metadata=_JSON_VALUE)
    is_error: bool


@_part("step-finish", ("finish_reason", "finishReason", _finish_reason), ("usage", "usage", _any))
@dataclass(frozen=True)
class StepFinish(Part):
    """The step is complete: it counts as read, and a reader that continues the turn after it
    starts at the next step. ``usage`` is the driver's JSON or None."""

    finish_reason: str
    usage: Any = field(metadata=_JSON_VALUE)


@_part(
    "step-reset",
    ("discarded_attempt", "discardedAttempt", lambda d, k, w: _int(d, k, w, 1)),
    ("reason", "reason", _str),
    ("tool_call_ids", "toolCallIds", _str_list),
)
@dataclass(frozen=True)
class StepReset(Part):
    """That attempt of the step is abandoned (the bridge restarted mid-step): drop
    what you had of it; the tool calls listed may have had effects."""

    discarded_attempt: int
    reason: str
    tool_call_ids: Tuple[str, ...] = ()


@_part("session-state", ("state", "state", _session_state))
@dataclass(frozen=True)
class SessionStateChanged(Part):
    """The session state changed; ``state`` is the new :class:`SessionState`."""

    state: SessionState


@_part("data", ("name", "name", _str), ("data", "data", _any))
@dataclass(frozen=True)
class Data(Part):
    """Driver-defined data (file changes, plans, ...), named by ``name``."""

    name: str
    data: Any = field(metadata=_JSON_VALUE)


@_part(
    "turn-finish",
    ("finish_reason", "finishReason", _finish_reason),
    ("usage", "usage", _any),
    ("error", "error", _opt_str),
)
@dataclass(frozen=True)
class TurnFinish(Part):
    """Terminal: ``finish_reason`` is ``stop``, ``cancelled``, ``error`` or ``max-steps``."""

    finish_reason: str
    usage: Any = field(metadata=_JSON_VALUE)
    error: Optional[str] = None


# ----------------------------------------------------------------------------- interactive turns

APPROVAL_CHOICES = ("allow-once", "allow-always", "deny")
"""The decisions an ``approval-request`` may offer and an ``approval-answer`` records."""

APPROVAL_DECIDERS = ("host", "policy", "timeout", "cancel")
"""Who decided (``approval-answer.by``): a host's answer, a policy (the host's ``approve=``
callable, or an allow-always the session remembers), the approval timeout (deny), or a
cancel of the turn (deny)."""


def _choices(d: Mapping[str, Any], key: str, where: str) -> Tuple[str, ...]:
    value = _str_list(d, key, where)
    if not value or any(c not in APPROVAL_CHOICES for c in value):
        raise ProtocolError(f"{where}.{key} must be a non-empty array of {', '.join(APPROVAL_CHOICES)}")
    return value


def _decision(d: Mapping[str, Any], key: str, where: str) -> str:
    value = _str(d, key, where)
    if value not in APPROVAL_CHOICES:
        raise ProtocolError(f"{where}.{key} must be one of {', '.join(APPROVAL_CHOICES)}")
    return value


def _decider(d: Mapping[str, Any], key: str, where: str) -> str:
    value = _str(d, key, where)
    if value not in APPROVAL_DECIDERS:
        raise ProtocolError(f"{where}.{key} must be one of {', '.join(APPROVAL_DECIDERS)}")
    return value


@_part(
    "approval-request",
    ("request_id", "requestId", _str),
    ("tool_call_id", "toolCallId", _str),
    ("tool_name", "toolName", _str),
    ("input", "input", _any),
    ("choices", "choices", _choices),
    ("title", "title", _opt_str),
)
@dataclass(frozen=True)
class ApprovalRequest(Part):
    """The agent asks before it runs a tool, and waits for the answer (approvals on).

    Attributes:
        request_id: the request's id, made by the bridge; it names the step's attempt, so an
            answer meant for an abandoned attempt never matches a request of a new one.
        tool_call_id: the tool call it is about. tool_name: the tool's name.
        input: the tool's JSON input (what it would run).
        choices: the decisions offered, a subset of ``allow-once``, ``allow-always``,
            ``deny``, in the agent's order (a tuple of ``str``).
        title: a one-line description for people (e.g. ``"shell: rm -rf build"``), or ``None``.

    Answer it with ``Turn.approve(request)`` or ``Turn.deny(request)``; the
    ``approval-answer`` part that follows records the decision. See the *Interactive turns*
    guide (:doc:`interactive`).
    """

    request_id: str
    tool_call_id: str
    tool_name: str
    input: Any = field(metadata=_JSON_VALUE)
    choices: Tuple[str, ...]
    title: Optional[str] = None

    def _repr_html_(self) -> str:
        """Jupyter's display: the tool, the title and the input the agent wants to run."""
        from html import escape

        body = _json_text(self.input) if not isinstance(self.input, str) else self.input
        title = f"<div>{escape(self.title)}</div>" if self.title else ""
        return (
            f'<div class="bridge-client-approval"><b>Approval requested</b>: '
            f"<code>{escape(self.tool_name)}</code>{title}"
            f"<pre>{escape(body)}</pre>"
            f"<small>request {escape(self.request_id)}; choices: {escape(', '.join(self.choices))}"
            "</small></div>"
        )


@_part(
    "approval-answer",
    ("request_id", "requestId", _str),
    ("decision", "decision", _decision),
    ("message", "message", _opt_str),
    ("by", "by", _decider),
)
@dataclass(frozen=True)
class ApprovalAnswer(Part):
    """The decision on an ``approval-request``, as the driver got it.

    Attributes:
        request_id: the request answered. decision: ``allow-once``, ``allow-always`` or ``deny``.
        message: the answerer's words for the agent (e.g. why it was denied), or ``None``.
        by: who decided: ``host``, ``policy``, ``timeout`` (denied when nobody answered in
            time) or ``cancel`` (denied because the turn was cancelled).
    """

    request_id: str
    decision: str
    message: Optional[str]
    by: str

    @property
    def allowed(self) -> bool:
        """True for ``allow-once`` and ``allow-always``."""
        return self.decision != "deny"


@_part("user-message", ("message_id", "messageId", _str), ("text", "text", _str))
@dataclass(frozen=True)
class UserMessage(Part):
    """A message the user added to the running turn (``Turn.say``), recorded in order when the
    bridge accepted it; the driver takes it when it can (at once, or at its next step).

    Attributes:
        message_id: the message's id (sending the same id again adds nothing). text: the words.
    """

    message_id: str
    text: str


_new_object = object.__new__
# Slot setters (C descriptors; they skip the frozen __setattr__): the delta fast path below.
_set_index = Part.__dict__["index"].__set__
_set_step = Part.__dict__["step"].__set__
_set_attempt = Part.__dict__["attempt"].__set__
_DELTA_TYPES: Dict[str, Tuple[Type[Part], Callable[[Any, Any], None]]] = {
    "text-delta": (TextDelta, TextDelta.__dict__["text"].__set__),
    "reasoning-delta": (ReasoningDelta, ReasoningDelta.__dict__["text"].__set__),
}


def part_from_dict(d: Any) -> Part:
    """Check a part's wire JSON object and build the matching :class:`Part` subclass.

    Args:
        d: a JSON object with ``type``, ``index``, ``step``, ``attempt`` and the type's fields.

    Raises:
        ProtocolError: not an object, unknown ``type``, or a field missing or mistyped.
    """
    name = d.get("type") if type(d) is dict else None
    delta = _DELTA_TYPES.get(name) if type(name) is str else None
    if delta is not None:
        # The hot path (most parts of a stream are deltas): the checks below, inline, and the
        # object built without the frozen dataclass __init__ (a setattr call per field); about
        # 5x faster. Anything that fails a check goes the long way, for its error message.
        index, step, attempt, text = d.get("index"), d.get("step"), d.get("attempt"), d.get("text")
        if (
            type(index) is int
            and 0 <= index <= MAX_SAFE_INTEGER
            and (step is None or (type(step) is int and 0 <= step <= MAX_SAFE_INTEGER))
            and type(attempt) is int
            and 1 <= attempt <= MAX_SAFE_INTEGER
            and type(text) is str
        ):
            delta_cls, set_text = delta
            part: Part = _new_object(delta_cls)
            _set_index(part, index)
            _set_step(part, step)
            _set_attempt(part, attempt)
            set_text(part, text)
            return part
    if not isinstance(d, dict):
        raise ProtocolError("a part must be a JSON object")
    kind = d.get("type")
    cls = PART_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None or not isinstance(kind, str):
        raise ProtocolError(f"unknown part type {kind!r}")
    args: List[Any] = [_int(d, "index", kind), _opt_int(d, "step", kind), _int(d, "attempt", kind, 1)]
    for _, key, decode in cls._fields:
        args.append(decode(d, key, kind))
    return _MAKERS[kind](*args)

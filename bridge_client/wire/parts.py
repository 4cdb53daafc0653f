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
"""

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Dict, List, Mapping, Optional, Set, Tuple, Type, TypeVar

from ..errors import ProtocolError

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

PROTOCOL_VERSION = 1
"""The protocol version this package speaks (see :doc:`protocol`)."""

FINISH_REASONS = ("stop", "cancelled", "error", "max-steps")
"""The ``finishReason`` values of ``turn-finish`` (see :doc:`protocol`, "Values")."""

TURN_STATUSES = ("started", "running", "continued", "finished")
"""The ``status`` values of ``StartTurn`` and ``CancelTurn`` results."""

T = TypeVar("T")

_JSON_VALUE_OPTIONS: Dict[str, Any] = {}
"""dataclasses-json's options of a field that holds any JSON value; :mod:`._schema` fills in
its marshmallow field (``Raw``) when it first builds a schema (dataclasses-json mistakes bare
``Any`` for Optional)."""

_JSON_VALUE = {"dataclasses_json": _JSON_VALUE_OPTIONS}
"""Field metadata for any JSON value."""


def _frozen_setattr(self: Any, name: str, value: Any) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self: Any, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


def _slotted(cls: Type[T]) -> Type[T]:
    """Remake a frozen dataclass with ``__slots__`` for its own fields (what ``dataclass(slots=True)``
    does on Python 3.10+): no ``__dict__`` per object, faster attributes. Defaults live on in
    the generated ``__init__``."""
    inherited: Set[str] = set()
    for base in cls.__mro__[1:]:
        inherited.update(getattr(base, "__slots__", ()))
    own = tuple(f.name for f in dataclasses.fields(cls) if f.name not in inherited)  # type: ignore[arg-type]
    body = dict(cls.__dict__)
    for name in own:
        body.pop(name, None)
    body.pop("__dict__", None)
    body.pop("__weakref__", None)
    body["__slots__"] = own
    # The dataclass's own frozen __setattr__ names the old class in super(): replace it.
    body["__setattr__"] = _frozen_setattr
    body["__delattr__"] = _frozen_delattr
    maker: Any = type(cls)
    new: Type[T] = maker(cls.__name__, cls.__bases__, body)
    new.__qualname__ = cls.__qualname__
    return new


# ----------------------------------------------------------------------------- field checks


def _get(d: Mapping[str, Any], key: str, where: str) -> Any:
    try:
        return d[key]
    except KeyError:
        raise ProtocolError(f"{where}.{key} is missing") from None
    except TypeError:
        raise ProtocolError(f"{where} must be a JSON object") from None


def _str(d: Mapping[str, Any], key: str, where: str) -> str:
    value = _get(d, key, where)
    if not isinstance(value, str):
        raise ProtocolError(f"{where}.{key} must be a string")
    return value


def _opt_str(d: Mapping[str, Any], key: str, where: str) -> Optional[str]:
    value = d.get(key)
    if value is not None and not isinstance(value, str):
        raise ProtocolError(f"{where}.{key} must be a string or null")
    return value


MAX_SAFE_INTEGER = 2**53 - 1
"""The largest integer every JSON peer reads exactly (JavaScript's Number.MAX_SAFE_INTEGER);
offsets, steps, attempts and revisions must stay at or below it."""

REVISION_HEADROOM = 2**32
"""Revisions a session must have room for: ``OpenSession`` refuses a state whose revision is
above ``MAX_SAFE_INTEGER - REVISION_HEADROOM`` (it could not change for long)."""

MAX_OPEN_REVISION = MAX_SAFE_INTEGER - REVISION_HEADROOM
"""The highest revision ``OpenSession`` accepts."""


def _int(d: Mapping[str, Any], key: str, where: str, minimum: int = 0) -> int:
    value = _get(d, key, where)
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= MAX_SAFE_INTEGER:
        raise ProtocolError(f"{where}.{key} must be an integer from {minimum} to 2**53-1")
    return value


def _opt_int(d: Mapping[str, Any], key: str, where: str) -> Optional[int]:
    value = d.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_SAFE_INTEGER:
        raise ProtocolError(f"{where}.{key} must be an integer from 0 to 2**53-1, or null")
    return value


def _bool(d: Mapping[str, Any], key: str, where: str) -> bool:
    value = _get(d, key, where)
    if not isinstance(value, bool):
        raise ProtocolError(f"{where}.{key} must be a boolean")
    return value


def _obj(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ProtocolError(f"{where} must be a JSON object")
    return value


def _json_text(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


class _Value:
    """Shared JSON methods: ``to_json`` gives compact text, ``from_json`` checks fields,
    ``schema()`` gives a marshmallow schema."""

    __slots__ = ()

    def to_dict(self, encode_json: bool = False) -> Dict[str, Any]:  # pragma: no cover - overridden
        """Return the value as its camelCase JSON object."""
        raise NotImplementedError

    @classmethod
    def schema(cls, **options: Any) -> Any:
        """A marshmallow schema of this type with camelCase keys, made by dataclasses-json
        (imported now, on first use): ``dump`` gives the same object as :meth:`to_dict`,
        ``load`` builds the value. Takes marshmallow's ``Schema`` options (``only``,
        ``exclude``, ``many``, ``partial``, ...) and ``infer_missing``."""
        from ._schema import schema_of

        return schema_of(cls, **options)

    def __getstate__(self) -> List[Any]:
        """Pickle support for the slotted, frozen dataclasses: their field values in order."""
        return [getattr(self, f.name) for f in dataclasses.fields(self)]  # type: ignore[arg-type]

    def __setstate__(self, state: List[Any]) -> None:
        for f, value in zip(dataclasses.fields(self), state):  # type: ignore[arg-type]
            object.__setattr__(self, f.name, value)

    def to_json(self, **_: Any) -> str:
        """Return the value as compact camelCase JSON text."""
        return _json_text(self.to_dict())

    @classmethod
    def from_json(cls: Type[T], s: Any, **_: Any) -> T:
        """Parse JSON text and check every field.

        Raises:
            ProtocolError: not JSON, or a field is missing or of the wrong type.
        """
        try:
            value = json.loads(s)
        except (TypeError, ValueError) as exc:
            raise ProtocolError(f"{cls.__name__}: not JSON: {exc}") from None
        except RecursionError:
            raise ProtocolError(f"{cls.__name__}: nested too deeply") from None
        return cls.from_dict(value)  # type: ignore[attr-defined, no-any-return]


# ----------------------------------------------------------------------------- states


@_slotted
@dataclass(frozen=True)
class SessionState(_Value):
    """What the bridge last gave for a session: ``{sessionId, revision, data}``.

    Attributes:
        session_id: the session's id.
        revision: grows by one at every change the bridge makes; the higher one wins in ``OpenSession``.
        data: the driver's own JSON (enough to start the session again in a fresh bridge).
    """

    session_id: str
    revision: int
    data: Any = field(metadata=_JSON_VALUE)

    def to_dict(self, encode_json: bool = False) -> Dict[str, Any]:
        """Return ``{"sessionId", "revision", "data"}``."""
        return {"sessionId": self.session_id, "revision": self.revision, "data": self.data}

    @classmethod
    def from_dict(cls, kvs: Any, *, infer_missing: bool = False) -> "SessionState":
        """Check and build from a JSON object. Raises :class:`ProtocolError`."""
        d = _obj(kvs, "SessionState")
        return cls(_str(d, "sessionId", "SessionState"), _int(d, "revision", "SessionState"), d.get("data"))


@_slotted
@dataclass(frozen=True)
class TurnState(_Value):
    """Enough for any host to continue a turn: what ``turn-start`` carries.

    ``{protocol, agentId, bridgeId, sessionId, turnId, prompt, startedAt, generation}``;
    ``startedAt`` is an ISO 8601 UTC timestamp. ``generation`` names the bridge store that
    holds the turn's log (``None`` in states written before stores had one). Safe to store and
    move between hosts.
    """

    protocol: int
    agent_id: str
    bridge_id: str
    session_id: str
    turn_id: str
    prompt: str
    started_at: str
    generation: Optional[str] = None

    def to_dict(self, encode_json: bool = False) -> Dict[str, Any]:
        """Return the camelCase JSON object (``generation`` is ``null`` when unknown)."""
        d: Dict[str, Any] = {
            "protocol": self.protocol,
            "agentId": self.agent_id,
            "bridgeId": self.bridge_id,
            "sessionId": self.session_id,
            "turnId": self.turn_id,
            "prompt": self.prompt,
            "startedAt": self.started_at,
        }
        d["generation"] = self.generation
        return d

    @classmethod
    def from_dict(cls, kvs: Any, *, infer_missing: bool = False) -> "TurnState":
        """Check and build from a JSON object. Raises :class:`ProtocolError`."""
        d = _obj(kvs, "TurnState")
        w = "TurnState"
        return cls(
            _int(d, "protocol", w, 1),
            _str(d, "agentId", w),
            _str(d, "bridgeId", w),
            _str(d, "sessionId", w),
            _str(d, "turnId", w),
            _str(d, "prompt", w),
            _str(d, "startedAt", w),
            _opt_str(d, "generation", w),
        )


@_slotted
@dataclass(frozen=True)
class HelloResult(_Value):
    """The answer to ``Hello``: who answers on this port (agent id, bridge id, protocol), and
    the generation of its store (``None`` from a bridge that does not say; see
    ``TurnState``)."""

    agent_id: str
    bridge_id: str
    instance: str
    protocol: int
    pid: int
    started_at: str
    generation: Optional[str] = None

    def to_dict(self, encode_json: bool = False) -> Dict[str, Any]:
        """Return the camelCase JSON object (``generation`` is ``null`` when unknown)."""
        d: Dict[str, Any] = {
            "agentId": self.agent_id,
            "bridgeId": self.bridge_id,
            "instance": self.instance,
            "protocol": self.protocol,
            "pid": self.pid,
            "startedAt": self.started_at,
        }
        d["generation"] = self.generation
        return d

    @classmethod
    def from_dict(cls, kvs: Any, *, infer_missing: bool = False) -> "HelloResult":
        """Check and build from a JSON object. Raises :class:`ProtocolError`."""
        d = _obj(kvs, "Hello")
        w = "Hello"
        return cls(
            _str(d, "agentId", w),
            _str(d, "bridgeId", w),
            _str(d, "instance", w),
            _int(d, "protocol", w),
            _int(d, "pid", w),
            _str(d, "startedAt", w),
            _opt_str(d, "generation", w),
        )


@_slotted
@dataclass(frozen=True)
class StartTurnResult(_Value):
    """The answer to ``StartTurn`` and ``CancelTurn``: ``{turnId, status}``."""

    turn_id: str
    status: str

    def to_dict(self, encode_json: bool = False) -> Dict[str, Any]:
        """Return ``{"turnId", "status"}``."""
        return {"turnId": self.turn_id, "status": self.status}

    @classmethod
    def from_dict(cls, kvs: Any, *, infer_missing: bool = False) -> "StartTurnResult":
        """Check and build from a JSON object. Raises :class:`ProtocolError`."""
        d = _obj(kvs, "TurnStatus")
        status = _str(d, "status", "TurnStatus")
        if status not in TURN_STATUSES:
            raise ProtocolError(f"TurnStatus.status must be one of {', '.join(TURN_STATUSES)}")
        return cls(_str(d, "turnId", "TurnStatus"), status)


# ----------------------------------------------------------------------------- parts

# Each part type: (attribute, JSON key, decoder). Decoders take (dict, key, where).
_Decoder = Callable[[Mapping[str, Any], str, str], Any]


def _any(d: Mapping[str, Any], key: str, where: str) -> Any:
    return d.get(key)


def _required_any(d: Mapping[str, Any], key: str, where: str) -> Any:
    return _get(d, key, where)


def _finish_reason(d: Mapping[str, Any], key: str, where: str) -> str:
    value = _str(d, key, where)
    if where == "turn-finish" and value not in FINISH_REASONS:
        raise ProtocolError(f"turn-finish.finishReason must be one of {', '.join(FINISH_REASONS)}")
    return value


def _turn_state(d: Mapping[str, Any], key: str, where: str) -> TurnState:
    return TurnState.from_dict(_get(d, key, where))


def _session_state(d: Mapping[str, Any], key: str, where: str) -> SessionState:
    return SessionState.from_dict(_get(d, key, where))


def _str_list(d: Mapping[str, Any], key: str, where: str) -> Tuple[str, ...]:
    value = _get(d, key, where)
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise ProtocolError(f"{where}.{key} must be an array of strings")
    return tuple(value)


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
        return cls

    return register


PART_TYPES: Dict[str, Type[Part]] = {}
"""Wire ``type`` name to Part subclass."""


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
    return cls(*args)

"""The bridge's RPC catalogue (see :doc:`protocol`, "Catalogue (protocol 1)").

Each :class:`Rpc` says what its payload must hold, whether it streams, whether the host may
send it again over a new connection after a drop, and which typed errors it may answer
with. Payload checks are pure functions, shared by the bridge (to answer ``BadRequest``) and
by tests.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from ..errors import BadRequest, RevisionExhausted
from .parts import APPROVAL_CHOICES, MAX_OPEN_REVISION, MAX_SAFE_INTEGER, SessionState

__all__ = [
    "Rpc",
    "CATALOGUE",
    "HELLO",
    "OPEN_SESSION",
    "START_TURN",
    "READ_TURN",
    "CANCEL_TURN",
    "CLOSE_SESSION",
    "ANSWER_APPROVAL",
    "SEND_MESSAGE",
    "MAX_ID_LENGTH",
    "MAX_MESSAGE_BYTES",
    "MAX_ANSWER_MESSAGE_BYTES",
    "MAX_APPROVAL_TIMEOUT",
    "check_interactive",
    "check_message_text",
    "MAX_PROMPT_BYTES",
    "check_id",
    "check_prompt",
    "check_env",
    "MAX_ENV_BYTES",
]

MAX_ID_LENGTH = 128
"""Session and turn ids: at most this many characters."""

MAX_PROMPT_BYTES = 4 * 1024 * 1024
"""A prompt is at most 4 MiB of UTF-8."""

MAX_MESSAGE_BYTES = 1024 * 1024
"""A user message (``SendMessage.text``) is at most 1 MiB of UTF-8."""

MAX_ANSWER_MESSAGE_BYTES = 64 * 1024
"""The message of an approval answer (``AnswerApproval.message``) is at most 64 KiB of UTF-8."""

MAX_APPROVAL_TIMEOUT = 365 * 24 * 3600.0
"""The longest approval timeout accepted, in seconds (a year; ``null`` waits for ever)."""

MAX_ENV_BYTES = 1024 * 1024
"""A session's environment is at most 1 MiB of UTF-8, names and values together."""

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]*\Z")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_RESERVED_ENV_PREFIX = "BRIDGE_CLIENT_"


def check_id(value: Any, name: str) -> str:
    """Check a session or turn id that came from the wire, before it touches a store or path.

    Ids are 1 to 128 characters of ``A-Z a-z 0-9 . _ : @ -``, starting with a letter or digit
    (so no path separators, no ``..`` component, nothing to quote).

    Raises:
        BadRequest: the id is not a string of that shape.
    """
    if not isinstance(value, str) or not value or len(value) > MAX_ID_LENGTH or not _ID.match(value):
        raise BadRequest(
            f"{name} must be 1 to {MAX_ID_LENGTH} characters of letters, digits, '.', '_', ':', '@' or '-'"
        )
    return value


def _payload(payload: Any, keys: Tuple[str, ...]) -> Mapping[str, Any]:
    if not isinstance(payload, dict):
        raise BadRequest("payload must be a JSON object")
    missing = [k for k in keys if k not in payload]
    if missing:
        raise BadRequest(f"payload lacks {', '.join(missing)}")
    return payload


def _none(payload: Any) -> Dict[str, Any]:
    return {}


def check_env(env: Any) -> Dict[str, str]:
    """Check a session's environment as it came from the wire (``OpenSession.env``).

    Names are like shell variables (a letter or ``_``, then letters, digits or ``_``) and never
    start with ``BRIDGE_CLIENT_`` (the bridge's own); values are strings without a NUL
    character; all of it at most :data:`MAX_ENV_BYTES` of UTF-8. ``None`` is no variables.
    Messages name the variable, never its value (values may be secrets).

    Returns:
        A new dict of names to values.

    Raises:
        BadRequest: not an object of that shape.
    """
    if env is None:
        return {}
    if not isinstance(env, dict):
        raise BadRequest("env must be an object of variable names to string values")
    out: Dict[str, str] = {}
    size = 0
    for name, value in env.items():
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise BadRequest(
                f"env: {str(name)[:64]!r} is not a variable name"
                " (a letter or '_', then letters, digits or '_')"
            )
        if name.startswith(_RESERVED_ENV_PREFIX):
            raise BadRequest(f"env: {name} is reserved for the bridge (names starting with BRIDGE_CLIENT_)")
        if not isinstance(value, str) or "\x00" in value:
            raise BadRequest(f"env: the value of {name} must be a string without NUL characters")
        try:
            size += len(name) + len(value.encode("utf-8")) + 2
        except UnicodeEncodeError:
            raise BadRequest(f"env: the value of {name} is not valid Unicode") from None
        out[name] = value
    if size > MAX_ENV_BYTES:
        raise BadRequest(f"env is over {MAX_ENV_BYTES} bytes of UTF-8")
    return out


def check_interactive(value: Any) -> Dict[str, Any]:
    """Check ``OpenSession.interactive``: ``{"approvals": bool, "approvalTimeout": seconds or
    null}`` (both optional; ``None`` or absent is approvals off).

    Returns:
        ``{"approvals": bool, "approval_timeout": Optional[float], "host_tools": the raw
        ``hostTools`` value or None, "tool_timeout": Optional[float]}``.

    Raises:
        BadRequest: not an object of that shape, or a timeout that is not a number of seconds
            > 0 (at most a year).
    """
    if value is None:
        return {"approvals": False, "approval_timeout": None}
    if not isinstance(value, dict):
        raise BadRequest("interactive must be an object {approvals, approvalTimeout} or null")
    approvals = value.get("approvals", False)
    if not isinstance(approvals, bool):
        raise BadRequest("interactive.approvals must be a boolean")
    timeout = value.get("approvalTimeout")
    if timeout is not None:
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not 0 < timeout <= MAX_APPROVAL_TIMEOUT
        ):
            raise BadRequest(
                "interactive.approvalTimeout must be a number of seconds > 0 (at most a year), or null"
            )
        timeout = float(timeout)
    tool_timeout = value.get("toolTimeout")
    if tool_timeout is not None and (
        isinstance(tool_timeout, bool)
        or not isinstance(tool_timeout, (int, float))
        or not 0 < tool_timeout <= MAX_APPROVAL_TIMEOUT
    ):
        raise BadRequest("interactive.toolTimeout must be a number of seconds > 0 (at most a year), or null")
    # hostTools is checked by wire.host_parts.check_host_tools where the session opens.
    return {
        "approvals": approvals,
        "approval_timeout": timeout,
        "host_tools": value.get("hostTools"),
        "tool_timeout": None if tool_timeout is None else float(tool_timeout),
    }


def _utf8_size(value: str, name: str) -> int:
    try:
        return len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise BadRequest(f"{name} is not valid Unicode: a lone surrogate at character {exc.start}") from None


def check_message_text(text: Any, name: str = "text", limit: int = MAX_MESSAGE_BYTES) -> str:
    """Check the text of a user message (or of an approval answer's message): a string of at
    most ``limit`` bytes of UTF-8.

    Raises:
        BadRequest: not a string, not valid Unicode, or too long.
    """
    if not isinstance(text, str):
        raise BadRequest(f"{name} must be a string")
    if _utf8_size(text, name) > limit:
        raise BadRequest(f"{name} is over {limit} bytes of UTF-8")
    return text


def _answer_approval(payload: Any) -> Dict[str, Any]:
    p = _payload(payload, ("sessionId", "turnId", "requestId", "decision"))
    decision = p["decision"]
    if decision not in APPROVAL_CHOICES:
        raise BadRequest(f"decision must be one of {', '.join(APPROVAL_CHOICES)}")
    message = p.get("message")
    if message is not None:
        check_message_text(message, "message", MAX_ANSWER_MESSAGE_BYTES)
    by = p.get("by", "host")
    if by not in ("host", "policy"):
        raise BadRequest("by must be host or policy")
    return {
        "session_id": check_id(p["sessionId"], "sessionId"),
        "turn_id": check_id(p["turnId"], "turnId"),
        "request_id": check_id(p["requestId"], "requestId"),
        "decision": decision,
        "message": message,
        "by": by,
    }


def _send_message(payload: Any) -> Dict[str, Any]:
    p = _payload(payload, ("sessionId", "turnId", "messageId", "text"))
    return {
        "session_id": check_id(p["sessionId"], "sessionId"),
        "turn_id": check_id(p["turnId"], "turnId"),
        "message_id": check_id(p["messageId"], "messageId"),
        "text": check_message_text(p["text"]),
    }


def _open_session(payload: Any) -> Dict[str, Any]:
    p = _payload(payload, ("sessionId",))
    session_id = check_id(p["sessionId"], "sessionId")
    env = check_env(p.get("env"))
    interactive = check_interactive(p.get("interactive"))
    state = p.get("state")
    if state is not None:
        try:
            state = SessionState.from_dict(state)
        except ValueError as exc:
            raise BadRequest(f"state: {exc}") from None
        if state.session_id != session_id:
            raise BadRequest("state.sessionId differs from sessionId")
        if state.revision > MAX_OPEN_REVISION:
            raise RevisionExhausted(
                f"state.revision {state.revision} leaves too little room to grow (at most "
                f"{MAX_OPEN_REVISION}, 2**53-1 less 2**32): start a new session",
                sessionId=session_id,
                revision=state.revision,
            )
    return {"session_id": session_id, "state": state, "env": env, "interactive": interactive}


def check_prompt(prompt: Any) -> str:
    """Check a prompt: a string of at most :data:`MAX_PROMPT_BYTES` bytes of UTF-8.

    Raises:
        BadRequest: not a string, not encodable as UTF-8 (a lone surrogate), or too long.
    """
    if not isinstance(prompt, str):
        raise BadRequest("prompt must be a string")
    try:
        size = len(prompt.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise BadRequest(f"prompt is not valid Unicode: a lone surrogate at character {exc.start}") from None
    if size > MAX_PROMPT_BYTES:
        raise BadRequest(f"prompt is over {MAX_PROMPT_BYTES} bytes of UTF-8")
    return prompt


def _start_turn(payload: Any) -> Dict[str, Any]:
    p = _payload(payload, ("sessionId", "turnId", "prompt"))
    prompt = check_prompt(p["prompt"])
    return {
        "session_id": check_id(p["sessionId"], "sessionId"),
        "turn_id": check_id(p["turnId"], "turnId"),
        "prompt": prompt,
    }


def _nonneg(p: Mapping[str, Any], key: str) -> int:
    value = p.get(key, 0)
    if value is None:
        value = 0
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_SAFE_INTEGER:
        raise BadRequest(f"{key} must be an integer from 0 to 2**53-1")
    return value


def _read_turn(payload: Any) -> Dict[str, Any]:
    p = _payload(payload, ("sessionId", "turnId"))
    return {
        "session_id": check_id(p["sessionId"], "sessionId"),
        "turn_id": check_id(p["turnId"], "turnId"),
        "offset": _nonneg(p, "offset"),
        "after_step": _nonneg(p, "afterStep"),
    }


def _turn_ref(payload: Any) -> Dict[str, Any]:
    p = _payload(payload, ("sessionId", "turnId"))
    return {"session_id": check_id(p["sessionId"], "sessionId"), "turn_id": check_id(p["turnId"], "turnId")}


def _session_ref(payload: Any) -> Dict[str, Any]:
    p = _payload(payload, ("sessionId",))
    return {"session_id": check_id(p["sessionId"], "sessionId")}


@dataclass(frozen=True)
class Rpc:
    """One row of the catalogue.

    Attributes:
        tag: the RPC's name on the wire (``Request.tag``).
        stream: True when the answer is a stream of Chunks ended by an Exit.
        resend: True when the host may send it again over a new connection after a drop.
        errors: the ``_tag`` names of the typed errors it may answer with.
        check: checks a payload and returns it as snake_case keyword arguments; raises
            :class:`~bridge_client.errors.BadRequest`.
    """

    tag: str
    stream: bool
    resend: bool
    errors: Tuple[str, ...]
    check: Callable[[Any], Dict[str, Any]]

    def decode_payload(self, payload: Any) -> Dict[str, Any]:
        """Check ``payload`` and return its fields as snake_case keyword arguments.

        Raises:
            BadRequest: the payload is not of this RPC's shape. RevisionExhausted: an
                ``OpenSession`` state whose revision is above ``MAX_OPEN_REVISION``.
        """
        return self.check(payload)


HELLO = Rpc("Hello", stream=False, resend=True, errors=(), check=_none)
OPEN_SESSION = Rpc(
    "OpenSession",
    stream=False,
    resend=True,
    errors=("BadRequest", "ApprovalsUnsupported", "ToolsUnsupported"),
    check=_open_session,
)
START_TURN = Rpc(
    "StartTurn",
    stream=False,
    resend=True,
    errors=("SessionNotFound", "TurnConflict", "BadRequest"),
    check=_start_turn,
)
READ_TURN = Rpc(
    "ReadTurn",
    stream=True,
    resend=True,
    errors=("SessionNotFound", "TurnNotFound", "BadRequest"),
    check=_read_turn,
)
CANCEL_TURN = Rpc("CancelTurn", stream=False, resend=True, errors=("TurnNotFound",), check=_turn_ref)
CLOSE_SESSION = Rpc(
    "CloseSession", stream=False, resend=True, errors=("SessionNotFound",), check=_session_ref
)

ANSWER_APPROVAL = Rpc(
    "AnswerApproval",
    stream=False,
    resend=True,  # idempotent by request id: the same answer again gets the recorded one
    errors=("TurnNotFound", "ApprovalNotFound", "ApprovalExpired", "ApprovalConflict", "BadRequest"),
    check=_answer_approval,
)
SEND_MESSAGE = Rpc(
    "SendMessage",
    stream=False,
    resend=True,  # idempotent by message id
    errors=("TurnNotFound", "TurnNotRunning", "MessagesUnsupported", "BadRequest"),
    check=_send_message,
)

CATALOGUE: Dict[str, Rpc] = {
    rpc.tag: rpc
    for rpc in (
        HELLO,
        OPEN_SESSION,
        START_TURN,
        READ_TURN,
        CANCEL_TURN,
        CLOSE_SESSION,
        ANSWER_APPROVAL,
        SEND_MESSAGE,
    )
}
"""Every RPC of protocol 1, by tag."""


def lookup(tag: str) -> Optional[Rpc]:
    """Return the catalogue row for ``tag``, or ``None`` for an unknown RPC."""
    return CATALOGUE.get(tag)

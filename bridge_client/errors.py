"""Every failure a user of bridge_client can catch, in one tree.

::

    HarnessError
    ├── BridgeLaunchError          the bridge could not be launched (``log_tail``; ``unwritable``:
    │                              its state directory cannot be written, a full disk)
    ├── BridgeUnavailable          no bridge answers within the resend window (carries ``state``)
    ├── Unauthorized               the bridge refused the token (HTTP 401; never retried)
    ├── UntrustedEndpoint          a wss:// endpoint's certificate did not verify (never retried)
    ├── BridgeMismatch             something answered with another agent id or bridge id
    ├── ProtocolError (ValueError) a frame or value broke the protocol
    ├── ConnectionLost (ConnectionError)
    │                              the connection dropped; safe requests are resent
    ├── MayHaveBeenReceived        an unsafe request was cut off; it may or may not have arrived
    ├── RpcError                   a typed failure the bridge answered with
    │   ├── BadRequest
    │   ├── SessionNotFound
    │   ├── TurnNotFound
    │   ├── TurnConflict
    │   ├── Overloaded             the bridge is at its bound of streams or turns (retryable)
    │   ├── RevisionExhausted      a session state's revision leaves no room to grow
    │   ├── ApprovalNotFound       the turn has no approval request with that id
    │   ├── ApprovalExpired        the request can no longer be answered (carries ``recorded``)
    │   ├── ApprovalConflict       the request was answered otherwise before (``recorded``)
    │   ├── ApprovalsUnsupported   approvals are on, and the session's driver cannot ask
    │   ├── MessagesUnsupported    the turn's driver cannot take user messages
    │   ├── TurnNotRunning         the turn finished: it takes no message any more
    │   ├── ToolsUnsupported       the session has host tools, and its driver cannot offer them
    │   ├── HostToolCallNotFound   the turn has no host tool call with that id
    │   ├── ExportDamaged          a session export file is damaged or truncated
    │   ├── ExportUnsupported      a session export file of a newer format
    │   ├── ExportTooLarge         a session too large to move in one import (``bytes``, ``limit``)
    │   ├── DriverMismatch         a restore into a bridge of another driver
    │   ├── RestoreConflict        the new bridge holds other turns of that session
    │   └── SessionMoved           the session was restored elsewhere (``epoch``, ``to``)
    ├── BadHostTool (TypeError)    a host tool cannot be offered (no hints, a bad name, ...)
    ├── SessionReleased            a call on a session after ``release()``
    ├── TurnInProgress (RuntimeError)
    │                              a second turn while one is being read on the same session
    ├── TurnStalled                a turn's driver sent no part for ``turn_stall_timeout`` (``state``)
    ├── UntrustedFile (PermissionError)
    │                              a secret, folder or state file is not this user's own
    ├── InvalidToken (ValueError)  a token cannot go in an ``Authorization: Bearer`` header
    ├── SandboxGone                the sandbox cannot run commands any more
    └── TemplateError              an install step of a template failed

Typed RPC failures, ``Unauthorized`` and ``ProtocolError`` are never retried; only
``ConnectionLost`` and ``Overloaded`` are (``retryable`` says so on every class).
"""
from __future__ import annotations

from typing import Any, ClassVar, Dict, Optional

__all__ = [
    "HarnessError",
    "BridgeLaunchError",
    "BridgeUnavailable",
    "Unauthorized",
    "UntrustedEndpoint",
    "BridgeMismatch",
    "ProtocolError",
    "ConnectionLost",
    "MayHaveBeenReceived",
    "RpcError",
    "BadRequest",
    "SessionNotFound",
    "TurnNotFound",
    "TurnConflict",
    "Overloaded",
    "RevisionExhausted",
    "ApprovalNotFound",
    "ApprovalExpired",
    "ApprovalConflict",
    "ApprovalsUnsupported",
    "MessagesUnsupported",
    "TurnNotRunning",
    "ToolsUnsupported",
    "BadHostTool",
    "HostToolCallNotFound",
    "ExportDamaged",
    "ExportUnsupported",
    "ExportTooLarge",
    "DriverMismatch",
    "RestoreConflict",
    "SessionMoved",
    "SessionReleased",
    "TurnInProgress",
    "TurnStalled",
    "UntrustedFile",
    "InvalidToken",
    "SandboxGone",
    "TemplateError",
    "rpc_error_from_wire",
]


class HarnessError(Exception):
    """Base of every error bridge_client raises on purpose.

    Attributes:
        retryable: True only where sending the same request again is safe.
    """

    retryable: ClassVar[bool] = False


class BridgeLaunchError(HarnessError):
    """The bridge did not start answering within ``launch_timeout`` seconds, or exited.

    Raised at once, also while a turn is read (instead of relaunching for the whole resend
    window), when the bridge's state directory cannot be written: a full disk, a quota, a
    read-only file system (``unwritable`` is then true). Nothing the bridge committed is
    lost: free space there and read the turn again (iterate it, or ``continue_turn``). See
    :doc:`resilience`.

    Args:
        message: what went wrong.
        log_tail: the last lines of the bridge's ``bridge.log`` (may be empty).
        unwritable: the state directory (its store, its launch files) cannot be written.

    Attributes:
        log_tail: as given.
        unwritable: as given (``bool``).
    """

    def __init__(self, message: str, log_tail: str = "", unwritable: bool = False) -> None:
        self.log_tail = log_tail
        self.unwritable = bool(unwritable)
        text = message if not log_tail else f"{message}\n--- bridge.log (tail) ---\n{log_tail}"
        super().__init__(text)


class BridgeUnavailable(HarnessError):
    """No bridge could be reached within the resend window, or the sandbox is gone.

    Attributes:
        state: the last :class:`~bridge_client.wire.parts.SessionState` the bridge gave
            (``None`` if it never gave one); ``release()`` returns the same value.
        journal: when the sandbox is gone and the session kept a journal
            (``CreateSessionOptions(journal=...)``), the path of that export file, which
            :func:`~bridge_client.restore_session` takes (the message says the command);
            else ``None``.
    """

    def __init__(self, message: str, state: Any = None) -> None:
        self.state = state
        self.journal: Optional[str] = None
        super().__init__(message)


class Unauthorized(HarnessError, PermissionError):
    """The bridge answered HTTP 401: the token is missing or wrong; or an SSH server refused
    the credentials of an SSH sandbox or engine. Never retried."""


class UntrustedEndpoint(HarnessError):
    """A ``wss://`` endpoint's TLS certificate did not verify: not signed by a trusted CA
    (the system's, or ``CreateSessionOptions.ca_bundle``), expired, or issued for another
    host name; or an SSH server's host key is not in known_hosts, or differs from it (or a
    remote Docker engine's TLS options are incomplete). Never retried, and verification is
    never turned off."""


class BridgeMismatch(HarnessError):
    """A bridge answered with another agent id, bridge id or protocol version."""


class ProtocolError(HarnessError, ValueError):
    """A frame or value does not follow the protocol (see :doc:`protocol`). The message says which
    field and why."""


class ConnectionLost(HarnessError, ConnectionError):
    """The connection to the bridge dropped or went silent past the keepalive bound.

    Requests the catalogue marks safe to resend are sent again on a new connection.
    """

    retryable = True


class MayHaveBeenReceived(HarnessError):
    """A request marked unsafe to resend was cut off by a drop: it may or may not have
    reached the bridge."""


class RpcError(HarnessError):
    """A typed failure the bridge answered with: ``{"_tag": NAME, "message": str, ...}``.

    Attributes:
        tag: the error's ``_tag`` on the wire.
        fields: every other field the bridge sent, as plain JSON values.
    """

    tag: ClassVar[str] = "RpcError"

    def __init__(self, message: str, **fields: Any) -> None:
        self.fields: Dict[str, Any] = fields
        super().__init__(message)

    def to_wire(self) -> Dict[str, Any]:
        """Return the error as the JSON object a ``Fail`` cause carries as ``error``
        (see :doc:`protocol`, "Envelope")."""
        return {"_tag": self.tag, "message": str(self), **self.fields}


class BadRequest(RpcError):
    """The payload of a request was not of the shape its RPC takes."""

    tag = "BadRequest"


class SessionNotFound(RpcError):
    """The bridge has no session with that id (open it first with ``OpenSession``)."""

    tag = "SessionNotFound"


class TurnNotFound(RpcError):
    """The bridge has no turn with that id in that session."""

    tag = "TurnNotFound"


class TurnConflict(RpcError):
    """A ``StartTurn`` reused a turn id with another prompt."""

    tag = "TurnConflict"


class Overloaded(RpcError):
    """The bridge is at its bound of concurrent streams or running turns (or cannot start a
    thread): nothing was started, and the same request may be sent again later. The host
    resends it with backoff within ``resend_window`` seconds, and raises this only when the
    window ran out. See :doc:`resilience`."""

    tag = "Overloaded"
    retryable = True


class RevisionExhausted(RpcError):
    """``OpenSession`` was given (or the bridge holds) a session state whose ``revision`` is so
    close to 2**53-1 that the session could not change much longer: refused at once rather
    than failing turns later. Start a new session (its revision begins at 0)."""

    tag = "RevisionExhausted"


class ApprovalNotFound(RpcError):
    """The turn has no approval request with that id (a typo, or a request of another turn).
    See the *Interactive turns* guide (:doc:`interactive`)."""

    tag = "ApprovalNotFound"


class _Recorded(RpcError):
    """An approval failure that may carry the answer the bridge recorded."""

    @property
    def recorded(self) -> Any:
        """The answer recorded for the request, as a JSON object ``{"requestId", "decision",
        "message", "by"}``, or ``None`` when nothing was recorded."""
        return self.fields.get("recorded")


class ApprovalExpired(_Recorded):
    """The approval request can no longer be answered: its step's attempt was abandoned (the
    bridge restarted, and the step asks again with a new request), nobody answered it within
    the approval timeout (it was denied), the turn was cancelled, or the turn finished. The
    answer was not applied to anything.

    Attributes:
        recorded: the answer the bridge recorded for it (``by`` ``timeout`` or ``cancel``), or
            ``None`` when the request simply lapsed.
    """

    tag = "ApprovalExpired"


class ApprovalConflict(_Recorded):
    """The approval request was answered before with another decision; the first answer stands.

    Attributes:
        recorded: the first answer, ``{"requestId", "decision", "message", "by"}``.
    """

    tag = "ApprovalConflict"


class ApprovalsUnsupported(RpcError):
    """Approvals are on (``CreateSessionOptions(approvals=True)`` or ``approve=``), and the
    session's driver cannot ask before it runs a tool. Turn approvals off, or use a driver
    that can ask (see the *Interactive turns* guide, :doc:`interactive`)."""

    tag = "ApprovalsUnsupported"


class MessagesUnsupported(RpcError):
    """``Turn.say`` was called on a turn whose driver cannot take user messages."""

    tag = "MessagesUnsupported"


class TurnNotRunning(RpcError):
    """The turn finished: a message can no longer be added to it."""

    tag = "TurnNotRunning"


class ToolsUnsupported(RpcError):
    """The session has host tools (``CreateSessionOptions(tools=...)``), and its driver cannot
    offer them to the agent. Raised when the session opens (its first request), before any
    turn runs. See the *Host tools* guide (:doc:`host-tools`)."""

    tag = "ToolsUnsupported"


class HostToolCallNotFound(RpcError):
    """The turn has no host tool call with that id (``ClaimHostTool``, ``AnswerHostTool``)."""

    tag = "HostToolCallNotFound"


class ExportDamaged(RpcError):
    """A session export file is damaged, truncated or not one (its header, length, SHA-256 or
    body's shape). Nothing was restored. See :doc:`portable-sessions`."""

    tag = "ExportDamaged"


class ExportUnsupported(RpcError):
    """A session export file of a newer format version (``fields["version"]``) than this
    bridge_client reads. Nothing was restored."""

    tag = "ExportUnsupported"


class ExportTooLarge(RpcError):
    """An export's session is over what one import carries (``fields["bytes"]``,
    ``fields["limit"]``). Nothing was sent."""

    tag = "ExportTooLarge"


class DriverMismatch(RpcError):
    """A restore into a bridge whose driver differs from the one the export was made with
    (``fields["expected"]``, ``fields["actual"]``: agent ids). Nothing was restored."""

    tag = "DriverMismatch"


class RestoreConflict(RpcError):
    """The restore's bridge holds turns of that session, or of those turn ids, already.
    Nothing was restored."""

    tag = "RestoreConflict"


class SessionMoved(RpcError):
    """The session was restored into another sandbox: this bridge serves it no more.

    Attributes (in ``fields``):
        epoch: the session's epoch where it went (``int``).
        to: where it went: ``{"sandbox": id, "bridgeId": id}``.
    """

    tag = "SessionMoved"


class BadHostTool(HarnessError, TypeError):
    """A host tool cannot be offered: a parameter without a type hint or of a type JSON cannot
    carry, a name that is not 1 to 64 letters, digits, ``_`` or ``-``, two tools of one name,
    or a value that is neither a function nor a :class:`~bridge_client.HostTool`. Raised when
    the session is created (by ``CreateSessionOptions`` or ``host_tool``)."""


class SessionReleased(HarnessError):
    """The session was released; only ``release()`` may be called again."""


class TurnInProgress(HarnessError, RuntimeError):
    """``turn()`` or ``continue_turn()`` was called from one thread while another thread is
    reading a turn of the same session, or holds an unfinished one. Let that turn finish, or
    call ``session.suspend_turn()`` (or ``cancel_turn()``) first; for parallel turns, use one
    session per thread.

    Never raised within one thread: there a new ``turn()`` suspends the unfinished turn (it
    keeps running in its bridge; iterating it again resumes it), because leaving a ``for``
    loop with ``break`` cannot run code to do so."""


class TurnStalled(HarnessError):
    """A turn's driver sent no part for ``turn_stall_timeout`` seconds while a read waited.

    Keepalive frames do not count: only parts do. The read stops (the turn is suspended, and
    keeps running in its bridge); iterating the turn again, or ``Session.continue_turn(
    err.state)``, reads on from where it stopped. See :doc:`resilience`.

    Attributes:
        state: the turn's :class:`~bridge_client.wire.parts.TurnState`.
        seconds: how long the driver had been silent, in seconds (``float``).
    """

    def __init__(self, message: str, state: Any = None, seconds: float = 0.0) -> None:
        self.state = state
        self.seconds = seconds
        super().__init__(message)


class UntrustedFile(HarnessError, PermissionError):
    """A secret, a folder or a state file is not one this user made: a symlink, not a regular
    file or folder, owned by another user, or writable (or, for private files, readable) by
    others. The message names the path, what is wrong and how to fix it. See :doc:`security`.

    Attributes:
        path: the file or folder (``str``).
    """

    def __init__(self, message: str, path: str = "") -> None:
        self.path = path
        super().__init__(message)


class InvalidToken(HarnessError, ValueError):
    """A bridge token cannot be sent as ``Authorization: Bearer <token>``: it is empty,
    longer than 1024 characters, or holds a character other than ASCII letters, digits and
    ``-._~+/`` (with ``=`` only at the end). Whitespace, line breaks and non-ASCII text are
    refused rather than trimmed, so every host sends the same token. See :doc:`security`."""


class SandboxGone(HarnessError):
    """The sandbox cannot run commands any more (its folder or container is gone)."""


class TemplateError(HarnessError):
    """An install step of a :class:`~bridge_client.template.Template` failed.

    Attributes:
        step: the name of the step that failed.
        output: the tail of what the step printed.
    """

    def __init__(self, message: str, step: str = "", output: str = "") -> None:
        self.step = step
        self.output = output
        super().__init__(message if not output else f"{message}\n{output}")


_RPC_ERRORS = {
    cls.tag: cls
    for cls in (
        BadRequest,
        SessionNotFound,
        TurnNotFound,
        TurnConflict,
        Overloaded,
        RevisionExhausted,
        ApprovalNotFound,
        ApprovalExpired,
        ApprovalConflict,
        ApprovalsUnsupported,
        MessagesUnsupported,
        TurnNotRunning,
        ToolsUnsupported,
        HostToolCallNotFound,
        ExportDamaged,
        ExportUnsupported,
        ExportTooLarge,
        DriverMismatch,
        RestoreConflict,
        SessionMoved,
    )
}


def rpc_error_from_wire(error: Dict[str, Any]) -> RpcError:
    """Turn a ``Fail.error`` object from the wire into the matching :class:`RpcError`.

    Args:
        error: a JSON object with a string ``_tag`` and usually a ``message``.

    Returns:
        An instance of the subclass named by ``_tag``; an unknown tag gives a plain
        :class:`RpcError` whose ``tag`` attribute is that name.
    """
    fields = {k: v for k, v in error.items() if k not in ("_tag", "message")}
    tag = str(error.get("_tag", "RpcError"))
    message = str(error.get("message", tag))
    cls = _RPC_ERRORS.get(tag)
    if cls is not None:
        return cls(message, **fields)
    exc = RpcError(message, **fields)
    exc.tag = tag  # type: ignore[misc]  # instance attribute shadows the ClassVar on purpose
    return exc

"""The options users give: how to reach a bridge, and how a session behaves.

See :doc:`concepts` for the bridge, the session and their timeouts."""
from __future__ import annotations

import inspect
import os
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Sequence, Tuple, Union

from .errors import BadRequest
from .host_tools import DEFAULT_TOOL_TIMEOUT, check_tools
from .redacted import Redacted, TokenFunction
from .sandbox.base import Sandbox
from .template import Template
from .wire import rpcs
from .wire.parts import SessionState

__all__ = ["BridgeOptions", "Workspace", "CreateSessionOptions", "SessionEnv"]


@dataclass(frozen=True)
class BridgeOptions:
    """How to install, launch and reach a bridge, and what its driver is made with.

    A bridge is shared: every host whose options give the same bridge id (``id``,
    ``command``, ``args``, ``agent_options`` and the sandbox's token) uses the one already
    running, whose own environment is the one it was launched with (for a ``LocalSandbox``,
    the launching program's). Give variables that may change (an API key) to the session
    instead, with ``CreateSessionOptions.env``: they reach a running bridge at once
    (see :doc:`concepts`, "Session environment").

    Attributes:
        id: the agent id; the bridge must answer ``Hello`` with it.
        template: installs the bridge program in a sandbox that lacks it; run before a
            launch (steps that remember, such as the bridge program's, are skipped while the
            marker they left is in the sandbox).
        command: the program that runs the bridge in the sandbox (e.g. ``"python3"``).
        args: its arguments (e.g. ``("-m", "bridge_client.bridge", "--driver", "shell")``).
        token: a function from a sandbox id to that sandbox's token (a
            :class:`~bridge_client.redacted.Redacted`), the same on every host, e.g.
            :func:`~bridge_client.redacted.hmac_token`.
        agent_options: plain JSON handed to the driver factory; part of the bridge id (other options,
            another bridge).
        bridge_idle_timeout: seconds with no connection and no running turn before the bridge
            exits (no connection and no running turn); not part of the bridge id.
        bind: the address the bridge listens on inside the sandbox (loopback by default).
    """

    id: str
    template: Template
    command: str
    args: Tuple[str, ...]
    token: TokenFunction
    agent_options: Any = None
    bridge_idle_timeout: float = 600.0
    bind: str = "127.0.0.1"

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ValueError("BridgeOptions.id must be a non-empty string")
        if not isinstance(self.command, str) or not self.command:
            raise ValueError("BridgeOptions.command must be a non-empty string")
        if isinstance(self.args, str) or not all(isinstance(a, str) for a in self.args):
            raise ValueError("BridgeOptions.args must be a sequence of strings")
        object.__setattr__(self, "args", tuple(self.args))
        if not callable(self.token):
            raise ValueError("BridgeOptions.token must be a function from a sandbox id to a Redacted token")
        if not self.bridge_idle_timeout > 0:
            raise ValueError("BridgeOptions.bridge_idle_timeout must be > 0 seconds")


_SANDBOX_MEMBERS = tuple(name for name in dir(Sandbox) if not name.startswith("_"))


def _is_sandbox(value: Any) -> bool:
    """``isinstance(value, Sandbox)`` without running the object's properties (which Python
    before 3.12 does for a runtime-checkable protocol): an adapter's lazy ``id`` or
    ``state_root`` is neither evaluated here nor mistaken for a missing member."""
    kind = type(value)
    if kind in _SANDBOX_TYPES:
        return True
    missing = object()
    if all(inspect.getattr_static(kind, name, missing) is not missing for name in _SANDBOX_MEMBERS):
        _SANDBOX_TYPES.add(kind)  # every member on the class: each instance has them (one look per class)
        return True
    return all(inspect.getattr_static(value, name, missing) is not missing for name in _SANDBOX_MEMBERS)


_SANDBOX_TYPES: "weakref.WeakSet[type]" = weakref.WeakSet()


@dataclass(frozen=True)
class Workspace:
    """Where a session works.

    Attributes:
        sandbox: the sandbox the agent works in (required by bridge agents): a
            :class:`~bridge_client.sandbox.base.Sandbox` such as ``LocalSandbox(".")``.

    Raises:
        TypeError: ``sandbox`` is neither ``None`` nor a Sandbox (e.g. a folder name given as
            a ``str``).
    """

    sandbox: Optional[Sandbox] = None

    def __post_init__(self) -> None:
        if self.sandbox is not None and not _is_sandbox(self.sandbox):
            raise TypeError(
                "Workspace needs a Sandbox such as LocalSandbox('.') or DockerSandbox.for_image(...), "
                f"got {type(self.sandbox).__name__}"
            )


class SessionEnv(Mapping[str, Union[str, Redacted]]):
    """A session's environment variables: names to values (``str`` or
    :class:`~bridge_client.redacted.Redacted`), immutable, whose ``repr`` never shows a value.

    Built by :class:`CreateSessionOptions` from the mapping you give; read a value with
    :meth:`reveal`. See the *Concepts* guide (:doc:`concepts`, "Session environment").

    Raises:
        TypeError: a name is not a ``str``, or a value neither a ``str`` nor a ``Redacted``.
        ValueError: a name is not like a shell variable (a letter or ``_``, then letters,
            digits or ``_``), starts with ``BRIDGE_CLIENT_``, or a value holds a NUL
            character or a lone surrogate; or all of it is over 1 MiB. The message names the
            variable, never its value.
    """

    __slots__ = ("_values",)

    def __init__(self, values: Optional[Mapping[str, Union[str, Redacted]]] = None) -> None:
        if values is not None and not isinstance(values, Mapping):
            raise TypeError(
                "env must be a mapping of variable names to str or Redacted values, "
                f"got {type(values).__name__}"
            )
        checked: Dict[str, Union[str, Redacted]] = {}
        for name, value in (values or {}).items():
            if not isinstance(name, str):
                raise TypeError(f"env: a variable name must be a str, got {type(name).__name__}")
            if not isinstance(value, (str, Redacted)):
                raise TypeError(
                    f"env: the value of {name} must be a str or Redacted, got {type(value).__name__}"
                )
            checked[name] = value
        self._values = checked
        try:
            rpcs.check_env(self.revealed())  # the bridge's own rules, at once
        except BadRequest as exc:
            raise ValueError(str(exc)) from None

    def reveal(self, name: str) -> str:
        """The value of ``name`` as a plain ``str`` (a ``Redacted`` one revealed).

        Raises:
            KeyError: no such variable.
        """
        value = self._values[name]
        return value.reveal() if isinstance(value, Redacted) else value

    def revealed(self) -> Dict[str, str]:
        """Every variable with its plain value: what ``OpenSession`` carries to the bridge.
        Keep the result out of logs."""
        return {name: self.reveal(name) for name in self._values}

    def __getitem__(self, name: str) -> Union[str, Redacted]:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SessionEnv):
            return self.revealed() == other.revealed()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._values)))

    def __repr__(self) -> str:
        return "SessionEnv({" + ", ".join(f"{k!r}: <redacted>" for k in self._values) + "})"


@dataclass(frozen=True)
class CreateSessionOptions:
    """How one session behaves. Durations are in seconds.

    Attributes:
        workspace: the session's workspace; its sandbox is required.
        resume: a :class:`~bridge_client.wire.parts.SessionState` to resume from (its
            ``session_id`` is the session's id), or ``None`` for a new session.
        session_id: the id of a new session (default: a random one).
        idle_timeout: an unused connection is closed after this long (seconds); the next use
            connects again.
        resend_window: how long a dropped request is sent again, in total (seconds).
        launch_timeout: how long to wait for a launched bridge to answer (seconds).
        open_timeout: how long one connection attempt (TCP, TLS, upgrade) may take.
        ping_interval: seconds between keepalive pings (see :doc:`protocol`, "Keepalive").
        ping_timeout: extra silence after ``ping_interval`` before the connection is lost.
        request_timeout: how long to wait for the answer to a request that does not stream;
            a bridge that does not answer in time counts as lost.
        turn_stall_timeout: seconds a read of a turn waits for its next part before it ends
            with :class:`~bridge_client.errors.TurnStalled` (carrying the turn state; the turn
            keeps running in its bridge, and iterating it again reads on). Only parts count:
            keepalive pings keep a connection open to a silent driver. ``None`` (the default)
            waits as long as the driver takes. See :doc:`resilience`.
        ca_bundle: a PEM file (or a folder) of CA certificates that ``wss://`` endpoints are
            verified against instead of the system's trust store (``str`` or path-like);
            verification itself is always on. Proxies come from ``https_proxy``,
            ``http_proxy`` and ``no_proxy`` (see :mod:`bridge_client.client.transport`).
        env: environment variables for the agent and every process it starts (names to
            ``str`` or :class:`~bridge_client.redacted.Redacted` values; becomes a
            :class:`SessionEnv`). They are sent to the bridge each time the session opens on
            a new connection, so a restarted bridge has them again, and they override the
            bridge's own environment for this session's turns only. They are never written
            to the bridge's store, its log, ``launch.json`` or a command line, and are not
            part of the bridge id: sessions with different variables share one bridge. See
            the *Concepts* guide (:doc:`concepts`, "Session environment").
        approvals: ``True`` makes the agent ask before it runs a tool: the turn yields an
            :class:`~bridge_client.wire.parts.ApprovalRequest` part and waits until it is
            answered (``Turn.approve``, ``Turn.deny``, the ``approve`` policy, or the
            approval timeout). Default ``False``: tools run without asking, as before. A
            driver that cannot ask makes the session's first request fail with
            :class:`~bridge_client.errors.ApprovalsUnsupported`.
        approval_timeout: seconds a request may wait for its answer before the bridge denies
            it (recorded as denied ``by="timeout"``); ``None`` (the default) waits as long as
            it takes. Counted in the bridge, so it holds while no host is connected.
        approve: a policy, called in the thread that reads the turn with each
            ``ApprovalRequest`` the turn yields (once the part was yielded, when the next
            part is asked for); its answer is sent for it: ``True`` or ``"allow-once"``,
            ``"allow-always"``, ``False`` or ``"deny"``, a ``(decision, message)`` pair, or
            ``None`` to leave the request to the caller. Giving it turns ``approvals`` on.
            See the *Interactive turns* guide (:doc:`interactive`).
        tools: host tools the agent may call: functions (described by
            :func:`~bridge_client.host_tool`) or :class:`~bridge_client.HostTool` values;
            kept as a tuple of ``HostTool``. They run in the thread that reads the turn. A
            driver that cannot offer them makes the session's first request fail with
            :class:`~bridge_client.ToolsUnsupported`. See :doc:`host-tools`.
        tool_timeout: seconds a host tool call waits for a host to answer before the agent
            gets an error result saying the host did not answer (default 600).
        journal: keep an export of the session on this host, written again (atomically) at
            the end of each turn the session reads to its end: ``None``/``False`` (the
            default) keeps none, ``True`` keeps it at
            ``<state dir>/journals/<session id>.export``, a path keeps it there. When the
            sandbox is gone, the session's :class:`~bridge_client.errors.BridgeUnavailable`
            names it (``journal``) and the command that restores it. See
            :doc:`portable-sessions`.

    Raises:
        BadHostTool: a tool cannot be offered (see :func:`~bridge_client.host_tool`).
        TypeError: ``workspace`` is not a :class:`Workspace`, ``session_id`` is not a ``str``,
            ``resume`` is not a SessionState, ``ca_bundle`` or ``journal`` is not a path, or ``env`` is not
            a mapping of ``str`` names to ``str``/``Redacted`` values, ``approvals`` is not a
            ``bool`` or ``approve`` not callable.
        ValueError: ``approval_timeout`` is not ``None`` or a number of seconds > 0, a
            duration is not a number > 0 (``turn_stall_timeout``: nor ``None``),
            ``ca_bundle`` does not exist, or an ``env`` name or value breaks the rules of
            :class:`SessionEnv`.
    """

    workspace: Workspace = field(default_factory=Workspace)
    resume: Optional[SessionState] = None
    session_id: Optional[str] = None
    idle_timeout: float = 60.0
    resend_window: float = 30.0
    launch_timeout: float = 30.0
    open_timeout: float = 10.0
    ping_interval: float = 5.0
    ping_timeout: float = 5.0
    request_timeout: float = 30.0
    ca_bundle: Optional[str] = None
    turn_stall_timeout: Optional[float] = None
    env: Mapping[str, Union[str, Redacted]] = field(default_factory=dict)
    approvals: bool = False
    approval_timeout: Optional[float] = None
    approve: Optional[Callable[[Any], Any]] = None
    tools: Sequence[Any] = ()
    tool_timeout: float = DEFAULT_TOOL_TIMEOUT
    journal: Union[None, bool, str, "os.PathLike[str]"] = None

    def __post_init__(self) -> None:
        self._check_interactive()
        self._check_tools()
        if self.journal is not None and not isinstance(self.journal, bool):
            try:
                object.__setattr__(self, "journal", os.fspath(self.journal))
            except TypeError:
                raise TypeError("CreateSessionOptions.journal must be None, a bool or a path") from None
        if not isinstance(self.env, SessionEnv):
            object.__setattr__(self, "env", SessionEnv(self.env))
        if not isinstance(self.workspace, Workspace):
            raise TypeError(
                "CreateSessionOptions.workspace needs a Workspace such as Workspace(LocalSandbox('.')), "
                f"got {type(self.workspace).__name__}"
            )
        if self.session_id is not None and not isinstance(self.session_id, str):
            raise TypeError(
                f"CreateSessionOptions.session_id must be a str or None, got {type(self.session_id).__name__}"
            )
        for name in (
            "idle_timeout",
            "resend_window",
            "launch_timeout",
            "open_timeout",
            "ping_interval",
            "ping_timeout",
            "request_timeout",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"CreateSessionOptions.{name} must be a number of seconds > 0")
        stall = self.turn_stall_timeout
        if stall is not None and (
            isinstance(stall, bool) or not isinstance(stall, (int, float)) or not 0 < stall < float("inf")
        ):
            raise ValueError(
                "CreateSessionOptions.turn_stall_timeout must be None or a number of seconds > 0"
            )
        if self.resume is not None and not isinstance(self.resume, SessionState):
            raise TypeError("CreateSessionOptions.resume must be a SessionState (SessionState.from_json)")
        if self.ca_bundle is not None:
            try:
                object.__setattr__(self, "ca_bundle", os.fspath(self.ca_bundle))
            except TypeError:
                raise TypeError(
                    "CreateSessionOptions.ca_bundle must be a path (str or os.PathLike)"
                ) from None
            if not isinstance(self.ca_bundle, str) or not os.path.exists(self.ca_bundle):
                raise ValueError(f"CreateSessionOptions.ca_bundle {self.ca_bundle!r} does not exist")

    def _check_interactive(self) -> None:
        if not isinstance(self.approvals, bool):
            raise TypeError(
                f"CreateSessionOptions.approvals must be a bool, got {type(self.approvals).__name__}"
            )
        if self.approve is not None:
            if not callable(self.approve):
                raise TypeError("CreateSessionOptions.approve must be a callable taking an ApprovalRequest")
            object.__setattr__(self, "approvals", True)
        timeout = self.approval_timeout
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not 0 < timeout <= rpcs.MAX_APPROVAL_TIMEOUT
        ):
            raise ValueError(
                "CreateSessionOptions.approval_timeout must be None or a number of seconds > 0 "
                "(at most a year)"
            )

    def _check_tools(self) -> None:
        object.__setattr__(self, "tools", check_tools(self.tools))
        timeout = self.tool_timeout
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not 0 < timeout <= rpcs.MAX_APPROVAL_TIMEOUT
        ):
            raise ValueError(
                "CreateSessionOptions.tool_timeout must be a number of seconds > 0 (at most a year)"
            )

    def interactive_payload(self) -> Optional[Dict[str, Any]]:
        """``OpenSession``'s ``interactive`` object for these options, or ``None`` (approvals
        off and no host tools: the payload carries none, as before)."""
        if not self.approvals and not self.tools:
            return None
        out: Dict[str, Any] = {"approvals": self.approvals, "approvalTimeout": self.approval_timeout}
        if self.tools:
            out["hostTools"] = [t.spec() for t in self.tools]
            out["toolTimeout"] = float(self.tool_timeout)
        return out

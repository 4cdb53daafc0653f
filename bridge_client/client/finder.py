"""Find the bridge: what a plan names, the state files it trusts, and whether the bridge the
listening file names answers as ours.

:class:`LaunchPlan` holds everything needed to find or launch one bridge in one sandbox.
:func:`find` reads the listening file (only the sandbox user's own), exposes its port,
connects and checks with ``Hello`` that the bridge of this agent id and bridge id answers.
Launching, when none answers, is :mod:`.launcher`'s.
"""
from __future__ import annotations

import logging
import posixpath
import time
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

from ..state_dir import identity
from ..errors import BridgeMismatch, ConnectionLost, HarnessError, ProtocolError, Unauthorized, UntrustedFile
from ..redacted import Redacted
from ..sandbox.base import Sandbox
from ..template import Template
from ..wire.parts import PROTOCOL_VERSION, HelloResult
from .connection import Connection

__all__ = ["LaunchPlan", "find", "read_state_file"]

log = logging.getLogger("bridge_client")


def read_state_file(sandbox: Sandbox, path: str) -> bytes:
    """Read a file of a bridge's state directory that decides where the token goes or what is
    launched (``listening.json``, ``launch.json``), trusting only the sandbox user's own.

    A sandbox that can tell who made a file (``read_private_file``: LocalSandbox, and
    DockerSandbox from the archive's tar header) refuses one that is not the sandbox user's
    regular 0600 file in a 0700 folder of theirs; for other adapters the file is read as it is
    and the bridge's own start-up checks of its state directory are what hold (see :doc:`security`).

    Raises:
        FileNotFoundError: no such file.
        UntrustedFile: refused (a ``PermissionError``).
        OSError, HarnessError: it cannot be read; the sandbox is gone.
    """
    reader = getattr(sandbox, "read_private_file", None)
    if reader is None:
        return sandbox.read_file(path)
    data: bytes = reader(path)
    return data


def _read_state_file(plan: "LaunchPlan", name: str) -> bytes:
    """:func:`read_state_file` of a file in the plan's state directory (only this user's own)."""
    return read_state_file(plan.sandbox, plan.path(name))


_warned: "set[Tuple[str, str]]" = set()  # (path, reason) already logged at WARNING


def _untrusted(plan: "LaunchPlan", exc: UntrustedFile) -> None:
    """Say once at WARNING (then at DEBUG) that a listening file is treated as no bridge."""
    key = (plan.path(identity.LISTENING_FILE), str(exc))
    level = logging.DEBUG if key in _warned else logging.WARNING
    _warned.add(key)
    log.log(level, "bridge %s: not trusting the listening file, treating it as no bridge: %s",
            plan.bridge_id, exc)


def _listening_bytes(plan: "LaunchPlan") -> Optional[bytes]:
    try:
        return _read_state_file(plan, identity.LISTENING_FILE)
    except UntrustedFile as exc:
        _untrusted(plan, exc)
        return None
    except (OSError, HarnessError):
        return None


def _find_or_refused(
    plan: "LaunchPlan",
    open_timeout: float,
    refused: "Optional[Tuple[bytes, Unauthorized]]",
    holder: "Optional[List[Connection]]" = None,
    deadline: Optional[float] = None,
) -> "Tuple[Optional[Tuple[Connection, HelloResult]], Optional[Tuple[bytes, Unauthorized]]]":
    """:func:`find`, with a 401 returned rather than raised, together with the listening file
    that led to it: the file may be stale and its port reused by another bridge (another
    sandbox, another token). While the file stays the one that was refused, its port is not
    asked again (a 401 is never retried)."""
    # One read of the listening file: the bytes compared with the refused one are the bytes
    # whose port is tried (a connect is one private-file read, not two).
    data = _listening_or_gone(plan)
    if refused is not None and data == refused[0]:
        return None, refused
    try:
        return _find_named(plan, data, open_timeout, holder, deadline), None
    except Unauthorized as exc:
        log.debug("bridge %s: the port in the listening file refused the token: %s", plan.bridge_id, exc)
        return None, (data or b"", exc)


@dataclass(frozen=True)
class LaunchPlan:
    """Everything needed to find or launch one bridge in one sandbox.

    Attributes:
        sandbox: where the bridge lives.
        agent_id: the agent id the bridge must answer ``Hello`` with.
        bridge_id: the bridge id (a digest of the launch options and the token).
        command, args: how to run the bridge program in the sandbox.
        template: install steps run before a launch.
        agent_options: JSON for the driver.
        token: the sandbox's token.
        bridge_idle_timeout: seconds the bridge waits unused before it exits.
        bind: the address the bridge listens on inside the sandbox.
        launch_timeout: seconds to wait for a launched bridge to answer.
        open_timeout, ping_interval, ping_timeout, ca_bundle: passed to :class:`Connection`.
    """

    sandbox: Sandbox
    agent_id: str
    bridge_id: str
    command: str
    args: Tuple[str, ...]
    template: Template
    agent_options: Any
    token: Redacted
    bridge_idle_timeout: float = 600.0
    bind: str = "127.0.0.1"
    launch_timeout: float = 30.0
    open_timeout: float = 10.0
    ping_interval: float = 5.0
    ping_timeout: float = 5.0
    ca_bundle: Optional[str] = None

    @property
    def state_dir(self) -> str:
        """``<state_root>/bridges/<bridge id>``."""
        return identity.state_dir(self.sandbox.state_root, self.bridge_id)

    def path(self, name: str) -> str:
        """A file in the state directory."""
        return posixpath.join(self.state_dir, name)


def _listening_or_gone(plan: LaunchPlan) -> Optional[bytes]:
    """The listening file's bytes, or ``None`` when there is none we trust.

    Raises:
        SandboxGone: the sandbox is gone (any other failure to read is no file).
    """
    try:
        return _read_state_file(plan, identity.LISTENING_FILE)
    except FileNotFoundError:
        return None
    except UntrustedFile as exc:
        _untrusted(plan, exc)  # never send the token to a port a stranger may have named
        return None
    except OSError as exc:
        log.debug("ignoring listening file of bridge %s: %s", plan.bridge_id, exc)
        return None


def _parse_listening(plan: LaunchPlan, data: Optional[bytes]) -> Optional[identity.ListeningInfo]:
    if data is None:
        return None
    try:
        return identity.parse_listening(data)
    except ProtocolError as exc:
        log.debug("ignoring listening file of bridge %s: %s", plan.bridge_id, exc)
        return None


def _check_hello(plan: LaunchPlan, hello: HelloResult) -> None:
    if hello.protocol != PROTOCOL_VERSION:
        raise BridgeMismatch(f"the bridge speaks protocol {hello.protocol}, this client {PROTOCOL_VERSION}")
    if hello.agent_id != plan.agent_id or hello.bridge_id != plan.bridge_id:
        raise BridgeMismatch(
            f"expected agent {plan.agent_id!r} bridge {plan.bridge_id}, "
            f"found agent {hello.agent_id!r} bridge {hello.bridge_id}"
        )


def find(
    plan: LaunchPlan,
    open_timeout: Optional[float] = None,
    holder: Optional[List[Connection]] = None,
    deadline: Optional[float] = None,
) -> Optional[Tuple[Connection, HelloResult]]:
    """Connect to the bridge named by the listening file, if it answers as ours.

    Args:
        open_timeout: seconds for the upgrade (default ``plan.open_timeout``); ``Hello`` may
            take ``ping_timeout`` more.
        holder: a list every connection made is appended to as soon as it exists (see
            :class:`Connection`): the caller closes those it does not keep, also after a
            ``KeyboardInterrupt``. A connection that is not our bridge is closed here.
        deadline: a ``time.monotonic()`` instant the ``Hello`` wait does not pass (at least
            0.05 s are given).

    Returns:
        ``(connection, hello)``, or ``None`` when no bridge of ours answers there.

    Raises:
        Unauthorized: the bridge there refused the token (a 401 is never retried).
        SandboxGone: the sandbox is gone.
    """
    return _find_named(plan, _listening_or_gone(plan), open_timeout, holder, deadline)


def _find_named(
    plan: LaunchPlan,
    data: Optional[bytes],
    open_timeout: Optional[float],
    holder: Optional[List[Connection]],
    deadline: Optional[float],
) -> Optional[Tuple[Connection, HelloResult]]:
    """:func:`find`, at the port of the listening file read as ``data`` (``None``: none)."""
    info = _parse_listening(plan, data)
    if info is None:
        return None
    endpoint = plan.sandbox.expose(info.port)
    try:
        conn = Connection(
            endpoint,
            plan.token,
            open_timeout=open_timeout if open_timeout is not None else plan.open_timeout,
            ping_interval=plan.ping_interval,
            ping_timeout=plan.ping_timeout,
            ca_bundle=plan.ca_bundle,
            holder=holder,
        )
    except ConnectionLost as exc:
        log.debug("bridge %s: nothing answers on port %d: %s", plan.bridge_id, info.port, exc)
        return None
    try:
        timeout = (open_timeout or plan.open_timeout) + plan.ping_timeout
        if deadline is not None:
            timeout = min(timeout, max(deadline - time.monotonic(), 0.05))
        hello = HelloResult.from_dict(conn.call("Hello", None, timeout=timeout))
        _check_hello(plan, hello)
    except HarnessError as exc:  # dropped, garbled, a typed failure, or another bridge
        log.debug("bridge %s: port %d is not our bridge: %s", plan.bridge_id, info.port, exc)
        conn.close()
        return None
    except BaseException:  # KeyboardInterrupt: no reader thread or socket is left behind
        conn.close()
        raise
    return conn, hello

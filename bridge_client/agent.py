"""The public entry: create a session of the agent behind a bridge.

``create_session("shell", "./repo")`` is the short way; ``create_session(options,
session_options)`` the full one, and what an adapter's :class:`Agent` does.
:func:`bridge_options` builds the options for the built-in drivers and for your own.
"""
from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Sequence, Union

from .client.session import Session
from .driver_options import BUILTIN_DRIVER_NAMES, check_agent_options
from .errors import HarnessError, ToolsUnsupported
from .options import BridgeOptions, CreateSessionOptions, Workspace
from .paths import default_secret
from .redacted import Redacted, TokenFunction, hmac_token
from .sandbox.base import Sandbox
from .template import Template, agent_cli_steps, bridge_template

__all__ = ["Agent", "bridge_agent", "bridge_options", "create_session"]


def create_session(
    options: Union[BridgeOptions, str],
    session_options: Union[CreateSessionOptions, Sandbox, str, "os.PathLike[str]"],
    *,
    agent_options: Any = None,
    tools: Optional[Sequence[Any]] = None,
    **session_fields: Any,
) -> Session:
    """Create a session of an agent that runs behind a bridge in a sandbox.

    Two forms. The short one takes a driver name and a folder::

        with bc.create_session("shell", "./repo") as session:
            turn = session.turn("ls")
            for part in turn:     # read the turn to its end
                pass
            print(turn.text())

    Either form takes the session's options as keywords, as ``requests.get(url, timeout=5)``
    takes its own (any field of :class:`CreateSessionOptions` but ``workspace``)::

        bc.create_session("shell", "./repo", idle_timeout=60, env={"CI": "1"})

    The full one takes what the short one builds for you, so every option can be set::

        options = bc.bridge_options("shell", bridge_idle_timeout=60)
        session_options = bc.CreateSessionOptions(workspace=bc.Workspace(bc.LocalSandbox("./repo")))
        session = bc.create_session(options, session_options)

    The session connects when first used: finding the bridge, or installing and launching it,
    happens at the first turn, not here. See the *Quickstart* and *Concepts* guides
    (``quickstart``, ``concepts``).

    Args:
        options: a :class:`BridgeOptions`, or a driver name (``"shell"``, ``"echo"``,
            ``"openai"``, ``"claude-code"``, ``"codex"``, ``"gemini"``, ``"qwen"``, ``"pi"``,
            ``"acp"`` or ``"module:callable"``) given to :func:`bridge_options` with
            ``agent_options``.
        session_options: a :class:`CreateSessionOptions`; or a :class:`Sandbox` (its
            workspace, default timeouts); or a folder path (a
            :class:`~bridge_client.sandbox.local.LocalSandbox` on it; the folder must exist).
        agent_options: plain JSON for the driver; only with a driver name.
        tools: host tools (functions or :class:`~bridge_client.HostTool` values) for the
            session; the same as ``CreateSessionOptions(tools=...)``, which they replace.
        session_fields: fields of :class:`CreateSessionOptions` (``idle_timeout=60``,
            ``env={...}``, ``approvals=True``, ...), which replace those of
            ``session_options``; checked as the class checks them.

    Returns:
        A :class:`~bridge_client.client.session.Session` (a context manager: leaving the
        ``with`` block releases it).

    Raises:
        HarnessError: the workspace has no sandbox.
        BadHostTool: a tool cannot be offered (see :func:`~bridge_client.host_tool`).
        ToolsUnsupported: tools were given, and the driver is a built-in one that cannot
            offer them (the bridge checks any other driver at the session's first request).
        TypeError: ``options`` or ``session_options`` is none of the types above,
            ``agent_options`` was given with a :class:`BridgeOptions`, or a keyword is no
            field of :class:`CreateSessionOptions` (or is ``workspace``).
        ValueError: an unknown driver name, or options that do not suit it.
        FileNotFoundError, NotADirectoryError: the folder does not exist or is not a folder.
        BadRequest: ``session_id`` is not a valid id.
        InvalidToken: the token function's result is not a ``Redacted`` bearer token.
        UntrustedFile, OSError: with a driver name, as for :func:`bridge_options`: this
            user's state directory (``BRIDGE_CLIENT_HOME``, else
            ``$XDG_STATE_HOME/bridge-client``, else ``~/.local/state/bridge-client``) or its
            secret file is not this user's, or cannot be created or read (``PermissionError``
            names the file).
    """
    sandbox_given: Optional[Sandbox] = None
    if isinstance(session_options, (str, os.PathLike)):
        from .sandbox.local import LocalSandbox

        sandbox_given = LocalSandbox(session_options)
    elif not isinstance(session_options, CreateSessionOptions) and isinstance(session_options, Sandbox):
        sandbox_given = session_options
    if sandbox_given is not None:
        session_options = CreateSessionOptions(workspace=Workspace(sandbox_given))
    if isinstance(options, str):
        # A container's Python is not this one: the sandbox says which it runs, else python3.
        python = None
        if sandbox_given is not None and type(sandbox_given).__name__ != "LocalSandbox":
            python = str(getattr(sandbox_given, "python", None) or "python3")
        options = bridge_options(options, agent_options=agent_options, python=python)
    elif agent_options is not None:
        raise TypeError(
            "agent_options goes with a driver name; with BridgeOptions, set them in bridge_options()"
        )
    if not isinstance(options, BridgeOptions):
        raise TypeError(
            "create_session needs a driver name such as 'shell', or a BridgeOptions such as "
            f"bridge_options('shell'), as its first argument, got {type(options).__name__}"
        )
    if not isinstance(session_options, CreateSessionOptions):
        raise TypeError(
            "create_session needs a folder, a Sandbox, or a CreateSessionOptions such as "
            "CreateSessionOptions(workspace=Workspace(LocalSandbox('.'))) as its second argument, "
            f"got {type(session_options).__name__}"
        )
    if session_fields:
        session_options = _with_fields(session_options, session_fields)
    if tools is not None:
        session_options = dataclasses.replace(session_options, tools=tuple(tools))
    _check_tools_supported(options.id, session_options)
    sandbox = session_options.workspace.sandbox
    if sandbox is None:
        raise HarnessError(
            f"agent {options.id!r} runs behind a bridge and requires a sandbox: set Workspace(sandbox=...)"
        )
    return Session(options, session_options, sandbox)


def _with_fields(session_options: CreateSessionOptions, fields: Dict[str, Any]) -> CreateSessionOptions:
    """``session_options`` with ``fields`` replaced; TypeError naming the fields there are."""
    known = [f.name for f in dataclasses.fields(CreateSessionOptions) if f.name != "workspace"]
    unknown = sorted(set(fields) - set(known))
    if unknown:
        where = "the second argument gives the workspace" if unknown == ["workspace"] else (
            "use one of " + ", ".join(known)
        )
        raise TypeError(f"create_session() got an unexpected keyword {unknown[0]!r}: {where}")
    return dataclasses.replace(session_options, **fields)


NO_HOST_TOOLS = frozenset(("pi", "echo", "shell", "vibe", "aider"))
"""The built-in drivers that cannot offer host tools to their agent (yet)."""


def _check_tools_supported(agent_id: str, session_options: CreateSessionOptions) -> None:
    if session_options.tools and agent_id in NO_HOST_TOOLS:
        raise ToolsUnsupported(
            f"the {agent_id} agent cannot call host tools: create the session without tools, "
            "or use a driver that offers them (openai)",
            agentId=agent_id,
        )


@dataclass(frozen=True)
class Agent:
    """An adapter's agent value: what it is and how to start its sessions.

    Attributes:
        id: the agent id.
        requires_sandbox: always True for agents behind a bridge.
        template: installs the agent and its bridge in a sandbox.
        create_session: ``(CreateSessionOptions) -> Session``.
    """

    id: str
    requires_sandbox: bool
    template: Template
    create_session: Callable[[CreateSessionOptions], Session]


def bridge_agent(options: BridgeOptions) -> Agent:
    """Return the :class:`Agent` whose sessions run behind the bridge ``options`` describes.

    Raises:
        TypeError: ``options`` is not a :class:`BridgeOptions`.
    """
    if not isinstance(options, BridgeOptions):
        raise TypeError(
            "bridge_agent needs a BridgeOptions such as bridge_options('shell'), "
            f"got {type(options).__name__}"
        )

    def start(session_options: CreateSessionOptions) -> Session:
        return create_session(options, session_options)

    return Agent(id=options.id, requires_sandbox=True, template=options.template, create_session=start)


def bridge_options(
    driver: str = "shell",
    *,
    agent_options: Any = None,
    agent_id: Optional[str] = None,
    python: Optional[str] = None,
    secret: Union[str, bytes, Redacted, None] = None,
    token: Optional[TokenFunction] = None,
    bridge_idle_timeout: float = 600.0,
) -> BridgeOptions:
    """Options for a bridge that runs this package's bridge program with ``driver``.

    Sessions with the same options (and sandbox token) share one bridge; a bridge that
    is already running keeps its own environment from its launch, so give a variable that may
    change (an API key, say) to the session, with ``CreateSessionOptions.env``: it reaches a
    running bridge at once (see the *Concepts* guide, ``concepts``, "Session environment").

    Args:
        driver: a built-in driver (``"echo"``, ``"shell"``, ``"openai"``, ``"acp"``, or an
            agent CLI's: ``"claude-code"``, ``"codex"``, ``"gemini"``, ``"qwen"``, ``"pi"``,
            ``"opencode"``, ``"copilot"``, ``"codex-acp"``, ``"cline"``, ``"vibe"``,
            ``"aider"``) or ``"module:callable"`` (a driver factory).
            The template installs the bridge program, and the agent's CLI for the CLI
            drivers when the sandbox lacks it and no ``executable`` is given (npm; for a
            ``LocalSandbox`` into a private prefix, see the *Drivers* page,
            ``drivers/index``).
        agent_options: plain JSON for the driver (part of the bridge id: other options, another bridge).
        agent_id: the id the driver reports (default: ``driver`` for the built-ins; required
            for ``module:callable`` drivers unless it is the same string).
        python: the interpreter that runs the bridge in the sandbox (default: this one,
            ``sys.executable``, which suits :class:`~bridge_client.sandbox.LocalSandbox`).
        secret: the secret shared by hosts (default :func:`~bridge_client.paths.default_secret`).
        token: a token function, instead of ``hmac_token(secret)``.
        bridge_idle_timeout: seconds before an unused bridge exits (no connection, no running turn).

    Returns:
        A :class:`BridgeOptions`.

    Raises:
        ValueError: ``driver`` is neither a built-in name nor ``module:callable``, or
            ``agent_options`` do not suit the built-in driver (not an object, an unknown
            option, a missing or ill-typed one); checked here, with the bridge's own checks
            (:func:`bridge_client.driver_options.check_agent_options`), so the error comes at
            once and not as a bridge that exits at the first turn. A ``module:callable``
            driver's options are checked by its factory, in the sandbox, at launch.
        TypeError: ``driver`` is not a ``str``.
        UntrustedFile: without ``secret`` or ``token`` (and no ``BRIDGE_CLIENT_SECRET``): the
            state directory or its ``secret`` file is a symlink, another user's, or open to
            others; the message says how to fix it.
        OSError: without ``secret`` or ``token``: the state directory cannot be created, or
            its secret read or written (``PermissionError``, ``FileNotFoundError``; its
            ``filename`` names the file). Set ``BRIDGE_CLIENT_HOME`` to a folder of your own.
    """
    if not isinstance(driver, str):
        raise TypeError(
            f"driver must be a str such as 'shell' or 'module:callable', got {type(driver).__name__}"
        )
    if driver in BUILTIN_DRIVER_NAMES:
        check_agent_options(driver, agent_options)
    else:
        module_name, sep, attr = driver.partition(":")
        if not (sep and module_name and attr):
            raise ValueError(
                f"unknown driver {driver!r}: use one of {', '.join(BUILTIN_DRIVER_NAMES)}, "
                "or module:callable (a driver factory importable in the sandbox)"
            )
    python = python or sys.executable
    if token is None:
        token = hmac_token(secret if secret is not None else default_secret())
    return BridgeOptions(
        id=agent_id or driver,
        template=Template(bridge_template(python).steps + agent_cli_steps(driver, agent_options)),
        command=python,
        args=("-m", "bridge_client.bridge", "--driver", driver),
        token=token,
        agent_options=agent_options,
        bridge_idle_timeout=bridge_idle_timeout,
    )

"""bridge_client: drive an AI agent that lives in a sandbox, from plain blocking Python.

::

    import bridge_client as bc

    with bc.create_session("shell", ".") as session:   # the shell agent, in this folder
        for part in session.turn("ls"):
            print(part)

See the *Quickstart* guide (:doc:`quickstart`) and the API reference (:doc:`api`).
"""
import os
import signal
import sys
from typing import TYPE_CHECKING, Any, List


def _command_interrupted(signum: int, frame: Any) -> None:
    """Ctrl-C while the ``bridge-client`` command loads its modules: one line and exit 130,
    not a traceback from inside an import. ``bridge_client.cli.main`` puts Python's own
    handler back once it runs."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C does not interrupt the exit
    try:
        sys.stderr.write("bridge-client: interrupted\n")
        sys.stderr.flush()
    except (AttributeError, OSError, ValueError):
        pass
    raise SystemExit(130)


def _started_as_command() -> bool:
    """True when this process is the ``bridge-client`` command (its console script, or
    ``python -m bridge_client`` / ``python -m bridge_client.cli``), not a program importing
    the package nor the bridge program."""
    if sys.argv and os.path.basename(sys.argv[0]) in ("bridge-client", "bridge-client-script.py"):
        return True
    words = list(getattr(sys, "orig_argv", []))[1:]
    if "-m" in words[:-1]:
        return words[words.index("-m") + 1] in ("bridge_client", "bridge_client.cli")
    return False


# Only in the command, over Python's own handler (no user's handler), and first of all: the
# imports below are where a Ctrl-C in the command's first moments lands. (signal.signal fails
# outside the main thread: a thread importing the package is no command's start.)
if signal.getsignal(signal.SIGINT) is signal.default_int_handler and _started_as_command():
    try:
        signal.signal(signal.SIGINT, _command_interrupted)
    except ValueError:
        pass

import importlib  # noqa: E402
import logging  # noqa: E402

__version__ = "0.1.0"

from .errors import (  # noqa: E402  (after the command's Ctrl-C guard above)
    ApprovalConflict,
    ApprovalExpired,
    ApprovalNotFound,
    ApprovalsUnsupported,
    BadRequest,
    BridgeLaunchError,
    BridgeMismatch,
    BridgeUnavailable,
    ConnectionLost,
    HarnessError,
    MayHaveBeenReceived,
    Overloaded,
    ProtocolError,
    RevisionExhausted,
    RpcError,
    SandboxGone,
    SessionNotFound,
    SessionReleased,
    TemplateError,
    TurnConflict,
    TurnInProgress,
    TurnNotFound,
    TurnStalled,
    Unauthorized,
    UntrustedEndpoint,
    UntrustedFile,
    InvalidToken,
    MessagesUnsupported,
    TurnNotRunning,
    ToolsUnsupported,
    BadHostTool,
    HostToolCallNotFound,
    ExportDamaged,
    ExportUnsupported,
    ExportTooLarge,
    DriverMismatch,
    RestoreConflict,
    SessionMoved,
)
from .wire.host_parts import HostToolCall, HostToolResult, HostToolStart  # noqa: E402
from .wire.parts import (  # noqa: E402
    ApprovalAnswer,
    ApprovalRequest,
    Data,
    Part,
    ReasoningDelta,
    SessionState,
    SessionStateChanged,
    StepFinish,
    StepReset,
    StepStart,
    TextDelta,
    ToolCall,
    ToolResult,
    TurnFinish,
    TurnStart,
    TurnState,
    UserMessage,
)

if TYPE_CHECKING:
    from .options import BridgeOptions, CreateSessionOptions, Workspace
    from .paths import default_secret
    from .redacted import Redacted, hmac_token
    from .sandbox import DockerSandbox, Endpoint, ExecResult, LocalSandbox, Sandbox, SSHSandbox
    from .template import Template, TemplateStep, bridge_template
    from .agent import Agent, bridge_agent, bridge_options, create_session
    from .portable import restore_session
    from .client.session import Session
    from .client.turn import Turn
    from .host_tools import HostTool, host_tool

# The host client (sessions, connections, launcher, resends) loads on first use (PEP 562), so
# the bridge program (``python -m bridge_client.bridge``, which imports this package first)
# starts without it: about 0.3 s less per bridge launch, in every cold start and recovery.
# The options, the sandbox adapters (docker, ssh) and the template load lazily too: the
# bridge never uses them, and they were most of its start-up imports.
_LAZY = {
    "BridgeOptions": ".options",
    "CreateSessionOptions": ".options",
    "Workspace": ".options",
    "default_secret": ".paths",
    "Redacted": ".redacted",
    "hmac_token": ".redacted",
    "DockerSandbox": ".sandbox",
    "Endpoint": ".sandbox",
    "ExecResult": ".sandbox",
    "LocalSandbox": ".sandbox",
    "Sandbox": ".sandbox",
    "SSHSandbox": ".sandbox",
    "Template": ".template",
    "TemplateStep": ".template",
    "bridge_template": ".template",
    "Agent": ".agent",
    "bridge_agent": ".agent",
    "bridge_options": ".agent",
    "create_session": ".agent",
    "restore_session": ".portable",
    "Session": ".client.session",
    "Turn": ".client.turn",
    "HostTool": ".host_tools",
    "host_tool": ".host_tools",
}


def __getattr__(name: str) -> Any:
    """Import a lazily exported name (PEP 562) on first access; AttributeError for others."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> List[str]:
    """The public names (lazy ones included, for ``dir()`` and tab completion), and the
    package's submodules and dunders; not the helpers this module imports for itself."""
    hidden = {"TYPE_CHECKING", "Any", "List", "importlib", "logging"}
    names = {n for n in globals() if not n.startswith("_") and n not in hidden}
    return sorted(names | set(__all__) | {"__version__", "__doc__", "__name__", "__path__", "__file__"})


logging.getLogger("bridge_client").addHandler(logging.NullHandler())

__all__ = [
    "__version__",
    "Agent",
    "bridge_agent",
    "bridge_options",
    "create_session",
    "Session",
    "Turn",
    "BridgeOptions",
    "CreateSessionOptions",
    "Workspace",
    "Redacted",
    "hmac_token",
    "default_secret",
    "Sandbox",
    "LocalSandbox",
    "DockerSandbox",
    "SSHSandbox",
    "Endpoint",
    "ExecResult",
    "Template",
    "TemplateStep",
    "bridge_template",
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
    "TurnState",
    "SessionState",
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
    "SessionReleased",
    "TurnInProgress",
    "TurnStalled",
    "UntrustedFile",
    "InvalidToken",
    "SandboxGone",
    "TemplateError",
    "HostTool",
    "host_tool",
    "HostToolCall",
    "HostToolStart",
    "HostToolResult",
    "ToolsUnsupported",
    "BadHostTool",
    "HostToolCallNotFound",
    "restore_session",
    "ExportDamaged",
    "ExportUnsupported",
    "ExportTooLarge",
    "DriverMismatch",
    "RestoreConflict",
    "SessionMoved",
]

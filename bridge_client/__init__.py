"""bridge_client: drive an AI agent that lives in a sandbox, from plain blocking Python.

::

    import bridge_client as bc

    sandbox = bc.LocalSandbox(".")
    options = bc.bridge_options("shell")
    with bc.create_session(options, bc.CreateSessionOptions(workspace=bc.Workspace(sandbox))) as session:
        for part in session.turn("ls"):
            print(part)
"""
import logging

__version__ = "0.1.0"

from .agent import Agent, bridge_agent, bridge_options, create_session
from .client.session import Session
from .client.turn import Turn
from .errors import (
    BadRequest,
    BridgeLaunchError,
    BridgeMismatch,
    BridgeUnavailable,
    ConnectionLost,
    HarnessError,
    MayHaveBeenReceived,
    ProtocolError,
    RpcError,
    SandboxGone,
    SessionNotFound,
    SessionReleased,
    TemplateError,
    TurnConflict,
    TurnInProgress,
    TurnNotFound,
    Unauthorized,
    UntrustedEndpoint,
)
from .options import BridgeOptions, CreateSessionOptions, Workspace
from .paths import default_secret
from .redacted import Redacted, hmac_token
from .sandbox import DockerSandbox, Endpoint, ExecResult, LocalSandbox, Sandbox
from .template import Template, TemplateStep, bridge_template
from .wire.parts import (
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
)

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
    "SessionReleased",
    "TurnInProgress",
    "SandboxGone",
    "TemplateError",
]

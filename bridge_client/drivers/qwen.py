"""The ``qwen`` driver: runs the Qwen Code CLI (npm ``@qwen-code/qwen-code``) headless inside
the sandbox. Qwen Code prints and reads the same stream-json messages as Claude Code, so the
mapping onto parts is the ``claude-code`` driver's (see :mod:`bridge_client.drivers.claude_code`).

Each turn runs, in the workspace::

    qwen --output-format stream-json --input-format stream-json
         [--resume SESSION_ID] [--model M] [--approval-mode MODE]
         [--append-system-prompt S] [--include-partial-messages] [EXTRA_ARGS...]

with the prompt written to stdin as one stream-json user message; stdin stays open for control
messages. After a successful ``result`` the process is kept warm for the session's next turn,
as the ``claude-code`` driver keeps its CLI (:mod:`bridge_client.drivers.warm_cli`).

The model endpoint comes from the CLI's own configuration (for an OpenAI-compatible server:
``OPENAI_BASE_URL``, ``OPENAI_API_KEY``, ``OPENAI_MODEL`` in the environment, or its
``settings.json``).

What survives a restart: the session state holds Qwen Code's session id
(``{"session_id": ...}``), resumed with ``--resume``; a turn continued after a restart with
completed steps resumes it with ``continue_prompt``, one with none runs its prompt again.

Options (``agent_options``, a JSON object or null):
    executable: the CLI program; given, it is run as is and never installed. Default:
        ``qwen`` on ``PATH``, else the copy the template installed in the sandbox's private
        prefix (:doc:`drivers/qwen`).
    model: ``--model`` (default: the CLI's).
    approval_mode: ``--approval-mode`` (``plan``, ``default``, ``auto-edit``, ``auto``,
        ``yolo``). Default: ``yolo`` in an isolated sandbox (a container, as the template
        records: it is the boundary); elsewhere (a ``LocalSandbox``) none, so the CLI's own
        approval checks apply unless you ask for ``yolo``.
    append_system_prompt: ``--append-system-prompt``.
    include_partial_messages: stream text as it arrives (default true; see the
        ``claude-code`` driver).
    extra_args: a list of further arguments.
    continue_prompt: the prompt that continues a turn cut by a restart.
    interrupt_grace: seconds >= 0 between the interrupt and killing the CLI (default 5).
    agent_idle_timeout: seconds > 0 a warm CLI process may stay unused before it is stopped
        (default 600), or null: kept until the session closes or the bridge exits.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ..driver_options import check_agent_options
from . import mcp_config, transcripts
from .claude_code import StreamJsonDriver
from .cli_install import sandbox_isolated

__all__ = ["QwenDriver", "make_driver"]


class QwenDriver(StreamJsonDriver):
    """The Qwen Code agent (``agent_id`` ``"qwen"``); see the module docstring.

    Args:
        options: the checked options (see :func:`make_driver`).
    """

    export_files, import_files = transcripts.qwen_export_files, transcripts.qwen_import_files

    agent_id = "qwen"
    program = "qwen"
    package = "@qwen-code/qwen-code"
    version = "0.24.4"
    label = "qwen"
    install_hint = "is Qwen Code installed? the qwen template installs it"
    initialize_for_approvals = True

    def __init__(self, options: Dict[str, Any]) -> None:
        super().__init__(options)
        default_mode = "yolo" if sandbox_isolated() else None
        self.approval_mode: Optional[str] = options.get("approval_mode", default_mode)

    def _mode(self, approvals: bool) -> Optional[str]:
        # With approvals Qwen Code must ask: yolo (the isolated default) asks nothing.
        if approvals and self.approval_mode in (None, "yolo"):
            return "default"
        return self.approval_mode

    def refusing_setting(self) -> str:
        """``approval_mode X``, or the default's reason (no ``yolo`` on a sandbox that is not
        isolated)."""
        if self.approval_mode:
            return f"approval_mode {self.approval_mode}"
        return "no approval_mode: the default on a sandbox that is not isolated"

    def argv(self, session_id: Optional[str], approvals: bool = False) -> List[str]:
        """The command line of one run (``session_id``: the Qwen Code session to resume;
        ``approvals``: approval mode ``default``, so it asks the bridge over stdio)."""
        argv = [self.executable, "--output-format", "stream-json", "--input-format", "stream-json"]
        if session_id:
            argv += ["--resume", session_id]
        if self.model:
            argv += ["--model", self.model]
        mode = self._mode(approvals)
        if mode:
            argv += ["--approval-mode", mode]
        if self.append_system_prompt:
            argv += ["--append-system-prompt", self.append_system_prompt]
        if self.partial:
            argv.append("--include-partial-messages")
        return argv + self.extra_args

    def env(self, approvals: bool = False) -> Dict[str, str]:
        """Quiet the notice Qwen Code prints for ``yolo`` without its own sandbox; the host
        tools' MCP server in its system settings (see :mod:`.mcp_config`)."""
        quiet = {"QWEN_CODE_SUPPRESS_YOLO_WARNING": "1"} if self._mode(approvals) == "yolo" else {}
        return {**quiet, **mcp_config.settings_env("QWEN_CODE_SYSTEM_SETTINGS_PATH")}

    supports_host_tools = True  # through the MCP server named host (drivers.mcp_config)



def make_driver(options: Any) -> QwenDriver:
    """Make the qwen driver from its options (see the module docstring).

    Raises:
        ValueError: an option is unknown or of the wrong type.
    """
    return QwenDriver(check_agent_options("qwen", options))

"""The ``copilot`` driver: the GitHub Copilot CLI (npm ``@github/copilot``) in its ACP mode,
``copilot --acp``, through the ``acp`` driver (:mod:`bridge_client.drivers.acp_preset`). See
its page, :doc:`drivers/copilot`.

The agent runs in the workspace as::

    copilot --acp --no-auto-update [EXTRA_ARGS...]

with ``COPILOT_AUTO_UPDATE=false``. It asks (``session/request_permission``) before each
shell command by itself.

With ``base_url`` the model server is the user's own (Copilot's "bring your own provider"):
``COPILOT_PROVIDER_BASE_URL`` is that URL, ``COPILOT_PROVIDER_TYPE`` is ``provider_type``,
and ``COPILOT_OFFLINE=true`` (no GitHub login, no calls to GitHub). The key is read by the
CLI from ``COPILOT_PROVIDER_API_KEY``: give it in the session's environment. Copilot masks
the key's value wherever it appears in its output, so a short key (``x``) garbles text; use
a long one. Without ``base_url`` the CLI uses its GitHub login (``COPILOT_GITHUB_TOKEN``,
``GH_TOKEN`` or ``GITHUB_TOKEN`` in the session's environment). ``model`` is
``COPILOT_MODEL`` either way.

Host tools (the session's ``tools``): ``copilot --acp`` offers the model no tool of the MCP
servers ``session/new`` names, so the MCP server named ``host`` is given on the command line
instead: ``--additional-mcp-config @FILE``, a file (mode 0600, in the relay's private folder)
holding ``{"mcpServers": {"host": {"type": "local", ..., "tools": ["*"]}}}``. The model sees
the tools as ``host-NAME``; Copilot asks before each call, and the driver allows a call of a
tool not marked ``approve=True`` (:mod:`bridge_client.drivers.acp_host`).

Options (``agent_options``, a JSON object or null):
    executable: the CLI program; given, it is run as is and never installed. Default:
        ``copilot`` on ``PATH``, else the copy the template installed.
    base_url: the model server (``http://127.0.0.1:8000/v1``).
    provider_type: its API with ``base_url``: ``openai`` (default), ``azure`` or
        ``anthropic``.
    model: ``COPILOT_MODEL``.
    extra_args: further arguments after ``--no-auto-update``.
    permission, continue_prompt, interrupt_grace, start_timeout, max_agents,
        agent_idle_timeout: as for the
        ``acp`` driver (``permission`` defaults as :mod:`.acp_preset` says).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ..bridge.host_relay import mcp_server_config
from ..driver_options import check_agent_options
from .acp_host import AgentRelay
from .acp_preset import AcpPreset
from .mcp_config import SERVER_NAME, write_private_json

__all__ = ["CopilotDriver", "make_driver"]


class CopilotDriver(AcpPreset):
    """The GitHub Copilot CLI agent (``agent_id`` ``"copilot"``); see the module docstring."""

    agent_id = "copilot"
    program = "copilot"
    package = "@github/copilot"
    version = "1.0.102"
    supports_host_tools = True  # through --additional-mcp-config (tests/agents/test_conformance.py)

    def agent_args(self, options: Dict[str, Any]) -> List[str]:
        """``["--acp", "--no-auto-update"]``."""
        return ["--acp", "--no-auto-update"]

    def agent_variables(self, options: Dict[str, Any]) -> Dict[str, str]:
        """``COPILOT_AUTO_UPDATE``, and the provider's variables (see the module docstring)."""
        env = {"COPILOT_AUTO_UPDATE": "false"}
        if options.get("base_url"):
            env["COPILOT_OFFLINE"] = "true"
            env["COPILOT_PROVIDER_BASE_URL"] = options["base_url"]
            env["COPILOT_PROVIDER_TYPE"] = options.get("provider_type") or "openai"
        if options.get("model"):
            env["COPILOT_MODEL"] = options["model"]
        return env

    def agent_command(self, relay: Optional[AgentRelay]) -> List[str]:
        """``argv``, with ``--additional-mcp-config @FILE`` naming the ``host`` server when
        the session has host tools."""
        if relay is None:
            return self.argv
        server = {"type": "local", **mcp_server_config(relay), "tools": ["*"]}
        path = write_private_json(relay, "copilot-mcp.json", {"mcpServers": {SERVER_NAME: server}})
        return [*self.argv, "--additional-mcp-config", "@" + path]

    def session_mcp_servers(self, relay: Optional[AgentRelay]) -> List[Dict[str, Any]]:
        """None: Copilot has the ``host`` server from its command line."""
        return []


def make_driver(options: Any) -> CopilotDriver:
    """Make the copilot driver from its options (see the module docstring).

    Raises:
        ValueError: an option is unknown or of the wrong type.
    """
    return CopilotDriver(check_agent_options("copilot", options))

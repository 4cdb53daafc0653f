"""The ``cline`` driver: the Cline CLI (npm ``cline``) in its ACP mode, ``cline --acp``,
through the ``acp`` driver (:mod:`bridge_client.drivers.acp_preset`). See its page,
:doc:`drivers/cline`.

The agent runs in the workspace as::

    cline --acp [EXTRA_ARGS...]

with ``CLINE_NO_AUTO_UPDATE=1``. It asks (``session/request_permission``) before each shell
command by itself.

It runs through a small launcher, :mod:`bridge_client.drivers.cline_launch` (with the
bridge's Python), because Cline's ACP mode runs its sessions in a detached helper,
``cline --cline-hub-daemon``, that by default listens on one port for the whole machine and
outlives the agent: the launcher gives each agent a hub of its own (``CLINE_HUB_PORT``) and
ends that hub when Cline exits.

With ``base_url`` the model server is an OpenAI-compatible one of your own:
``CLINE_PROVIDER=openai-compatible``, ``CLINE_MODEL`` is ``model``, and the launcher writes
Cline's provider settings (the server's URL, the model and the key, read from the variable
``api_key_env`` names, default ``OPENAI_API_KEY``, of the session's environment; mode 0600)
into a Cline data folder of its own under the bridge's state directory (``CLINE_DATA_DIR``;
one per HOME and workspace, so a restarted agent finds its sessions again): Cline's ACP mode
reads the key from no variable. The launcher also sets ``CLINE_API_KEY`` to that key (Cline's
ACP mode asks for that variable before ``session/new`` whatever the provider, and sends it
as the key). Without ``base_url`` the CLI uses its own settings (``cline auth``) and the
session's ``CLINE_API_KEY``.

A bridge that is SIGKILLed ends the agent's process group, but not the hub (it runs in a
session of its own): the launcher's watchdog, outside that group, ends it then.

Options (``agent_options``, a JSON object or null):
    executable: the CLI program; given, it is run as is and never installed. Default:
        ``cline`` on ``PATH``, else the copy the template installed.
    base_url: the OpenAI-compatible server (``http://127.0.0.1:8000/v1``).
    model: ``CLINE_MODEL`` (default ``gpt-4o``, Cline's for that provider).
    api_key_env: the session's variable holding the key (default ``OPENAI_API_KEY``).
    extra_args: further arguments after ``--acp``.
    permission, continue_prompt, interrupt_grace, start_timeout, max_agents,
        agent_idle_timeout: as for the
        ``acp`` driver (``permission`` defaults as :mod:`.acp_preset` says).
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any, Dict, List, Optional

from ..bridge.host_relay import mcp_server_config
from ..driver_options import check_agent_options
from .acp_host import AgentRelay
from .acp_preset import AcpPreset
from .mcp_config import SERVER_NAME, write_private_json

__all__ = ["ClineDriver", "make_driver"]

PROVIDER = "openai-compatible"


class ClineDriver(AcpPreset):
    """The Cline CLI agent (``agent_id`` ``"cline"``); see the module docstring."""

    agent_id = "cline"
    program = "cline"
    package = "cline"
    version = "3.0.65"
    supports_host_tools = True  # through its MCP settings file (tests/agents/test_conformance.py)

    def __init__(self, options: Dict[str, Any]) -> None:
        super().__init__(options)
        from . import STATE_DIR

        launch = [sys.executable, "-m", "bridge_client.drivers.cline_launch"]
        if options.get("base_url"):
            root = STATE_DIR or os.path.join(tempfile.gettempdir(), "bridge-client-cline")
            launch += ["--base-url", options["base_url"], "--model", options.get("model") or "gpt-4o"]
            launch += ["--key-env", options.get("api_key_env") or "OPENAI_API_KEY"]
            launch += ["--data-root", os.path.join(root, "cline")]
        self.argv = [*launch, "--", *self.argv]

    def agent_command(self, relay: Optional[AgentRelay]) -> List[str]:
        """``argv``, with the launcher's ``--mcp-settings FILE`` naming the ``host`` server
        when the session has host tools."""
        if relay is None:
            return self.argv
        server = {**mcp_server_config(relay), "disabled": False}
        path = write_private_json(relay, "cline_mcp_settings.json", {"mcpServers": {SERVER_NAME: server}})
        split = self.argv.index("--")
        return [*self.argv[:split], "--mcp-settings", path, *self.argv[split:]]

    def session_mcp_servers(self, relay: Optional[AgentRelay]) -> List[Dict[str, Any]]:
        """None: Cline has the ``host`` server from its MCP settings file."""
        return []

    def agent_args(self, options: Dict[str, Any]) -> List[str]:
        """``["--acp"]``."""
        return ["--acp"]

    def agent_variables(self, options: Dict[str, Any]) -> Dict[str, str]:
        """``CLINE_NO_AUTO_UPDATE``, and the provider's variables (see the module docstring)."""
        env = {"CLINE_NO_AUTO_UPDATE": "1"}
        if options.get("base_url"):
            model = options.get("model") or "gpt-4o"
            env["CLINE_PROVIDER"] = PROVIDER
            env["CLINE_MODEL"] = model
        elif options.get("model"):
            env["CLINE_MODEL"] = options["model"]
        return env


def make_driver(options: Any) -> ClineDriver:
    """Make the cline driver from its options (see the module docstring).

    Raises:
        ValueError: an option is unknown or of the wrong type.
    """
    return ClineDriver(check_agent_options("cline", options))

"""The ``codex-acp`` driver: Zed's ACP agent for Codex (npm ``@zed-industries/codex-acp``,
which embeds the Codex engine and needs no ``codex`` program), through the ``acp`` driver
(:mod:`bridge_client.drivers.acp_preset`). See its page, :doc:`drivers/codex-acp`.

The agent runs in the workspace as::

    codex-acp -c approval_policy="untrusted" -c sandbox_mode="MODE" [-c PROVIDER...] [EXTRA_ARGS...]

Codex reads the rest of its configuration from ``$CODEX_HOME/config.toml`` (default
``~/.codex``); each ``-c`` overrides one key of it. ``untrusted`` makes Codex ask
(``session/request_permission``) before any command it does not know to be harmless
(reading commands such as ``ls`` run without asking).

With ``base_url`` the model server is a Responses API endpoint: the overrides add a provider
``bridge`` (``model_provider="bridge"``, its ``base_url``, ``wire_api="responses"``, and
``env_key`` the variable ``api_key_env`` names, whose value Codex sends as the key).
``model`` is Codex's ``model`` either way.

The sandbox mode: ``danger-full-access`` by default in an isolated sandbox (a container, the
boundary), ``workspace-write`` elsewhere (Codex's own sandbox, which needs bubblewrap on
Linux: without it each command fails).

codex-acp does not exit when its stdin closes: the driver's close ends it with SIGTERM to its
process group after the polite grace (the node wrapper and the Codex binary both).

Options (``agent_options``, a JSON object or null):
    executable: the agent program; given, it is run as is and never installed. Default:
        ``codex-acp`` on ``PATH``, else the copy the template installed.
    base_url: a Responses API endpoint (``http://127.0.0.1:8000/v1``).
    model: Codex's ``model``.
    api_key_env: the variable that holds the key for ``base_url`` (default
        ``OPENAI_API_KEY``; give it in the session's environment).
    sandbox: ``read-only``, ``workspace-write`` or ``danger-full-access`` (see above).
    extra_args: further arguments (more ``-c key=value`` overrides).
    permission, continue_prompt, interrupt_grace, start_timeout, max_agents,
        agent_idle_timeout: as for the
        ``acp`` driver (``permission`` defaults as :mod:`.acp_preset` says).
"""

from __future__ import annotations

import json
from typing import Any, Dict, List

from ..driver_options import check_agent_options
from .acp_preset import AcpPreset

__all__ = ["CodexAcpDriver", "make_driver"]


def _override(key: str, value: str) -> List[str]:
    # The value of a -c override is TOML; a JSON string is a TOML basic string.
    return ["-c", f"{key}={json.dumps(value)}"]


class CodexAcpDriver(AcpPreset):
    """Zed's codex-acp agent (``agent_id`` ``"codex-acp"``); see the module docstring."""

    agent_id = "codex-acp"
    program = "codex-acp"
    package = "@zed-industries/codex-acp"
    version = "0.16.0"
    supports_host_tools = True  # the MCP server named host of session/new (tests/agents/test_conformance.py)

    def agent_args(self, options: Dict[str, Any]) -> List[str]:
        """The ``-c`` overrides (see the module docstring)."""
        sandbox = options.get("sandbox") or ("danger-full-access" if self.isolated else "workspace-write")
        args = _override("approval_policy", "untrusted") + _override("sandbox_mode", sandbox)
        if options.get("base_url"):
            provider = "model_providers.bridge"
            args += _override("model_provider", "bridge") + _override(f"{provider}.name", "bridge")
            args += _override(f"{provider}.base_url", options["base_url"])
            args += _override(f"{provider}.wire_api", "responses")
            args += _override(f"{provider}.env_key", options.get("api_key_env") or "OPENAI_API_KEY")
        if options.get("model"):
            args += _override("model", options["model"])
        return args


def make_driver(options: Any) -> CodexAcpDriver:
    """Make the codex-acp driver from its options (see the module docstring).

    Raises:
        ValueError: an option is unknown or of the wrong type.
    """
    return CodexAcpDriver(check_agent_options("codex-acp", options))

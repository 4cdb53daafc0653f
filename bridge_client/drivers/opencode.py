"""The ``opencode`` driver: OpenCode (npm ``opencode-ai``) in its ACP mode, ``opencode acp``,
through the ``acp`` driver (:mod:`bridge_client.drivers.acp_preset`). See its page,
:doc:`drivers/opencode`.

The agent runs in the workspace as::

    opencode acp [EXTRA_ARGS...]

with OpenCode's configuration in ``OPENCODE_CONFIG_CONTENT`` (a JSON object OpenCode merges
over its other configuration files): bash, edits and web fetches ask first
(``"permission": {"bash": "ask", "edit": "ask", "webfetch": "ask"}``), no sharing, no
automatic update (also ``OPENCODE_DISABLE_AUTOUPDATE`` and ``OPENCODE_DISABLE_SHARE``).

With ``base_url`` the model server is an OpenAI-compatible one: the configuration gets a
provider ``bridge`` (OpenCode's bundled ``@ai-sdk/openai-compatible``, so nothing is
fetched) at that URL whose key is read from the variable ``api_key_env`` names (OpenCode's
``{env:NAME}``), with the one model ``model`` (with tool calls), used as both ``model`` and
``small_model`` (OpenCode's session titles); and nothing else is fetched at start
(``OPENCODE_DISABLE_MODELS_FETCH``, ``OPENCODE_DISABLE_LSP_DOWNLOAD``,
``OPENCODE_DISABLE_DEFAULT_PLUGINS``). Without ``base_url``, ``model`` is OpenCode's own
``provider/model`` name and its providers are configured as usual.

Options (``agent_options``, a JSON object or null):
    executable: the CLI program; given, it is run as is and never installed. Default:
        ``opencode`` on ``PATH``, else the copy the template installed.
    base_url: an OpenAI-compatible endpoint (``http://127.0.0.1:8000/v1``); needs ``model``.
    model: the model's id at ``base_url``, else OpenCode's ``provider/model``.
    api_key_env: the variable that holds the key for ``base_url`` (default
        ``OPENAI_API_KEY``; give it in the session's environment).
    extra_args: further arguments after ``acp``.
    permission, continue_prompt, interrupt_grace, start_timeout, max_agents,
        agent_idle_timeout: as for the
        ``acp`` driver (``permission`` defaults as :mod:`.acp_preset` says).
"""

from __future__ import annotations

import json
from typing import Any, Dict, List

from ..driver_options import check_agent_options
from .acp_preset import AcpPreset

__all__ = ["OpenCodeDriver", "make_driver"]


class OpenCodeDriver(AcpPreset):
    """The OpenCode agent (``agent_id`` ``"opencode"``); see the module docstring."""

    agent_id = "opencode"
    program = "opencode"
    package = "opencode-ai"
    version = "1.18.33"
    supports_host_tools = True  # the MCP server named host of session/new (tests/agents/test_conformance.py)

    def agent_args(self, options: Dict[str, Any]) -> List[str]:
        """``["acp"]``."""
        return ["acp"]

    def agent_variables(self, options: Dict[str, Any]) -> Dict[str, str]:
        """``OPENCODE_CONFIG_CONTENT`` and the ``OPENCODE_DISABLE_*`` switches (see the module
        docstring)."""
        config: Dict[str, Any] = {
            "permission": {"bash": "ask", "edit": "ask", "webfetch": "ask"},
            "share": "disabled",
            "autoupdate": False,
        }
        env = {"OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_SHARE": "1"}
        model = options.get("model")
        base_url = options.get("base_url")
        if base_url and model:
            key = options.get("api_key_env") or "OPENAI_API_KEY"
            config["provider"] = {
                "bridge": {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "bridge",
                    "options": {"baseURL": base_url, "apiKey": "{env:%s}" % key},
                    "models": {model: {"name": model, "tool_call": True}},
                }
            }
            model = config["small_model"] = f"bridge/{model}"
            for switch in ("MODELS_FETCH", "LSP_DOWNLOAD", "DEFAULT_PLUGINS"):
                env[f"OPENCODE_DISABLE_{switch}"] = "1"
        if model:
            config["model"] = model
        env["OPENCODE_CONFIG_CONTENT"] = json.dumps(config)
        return env


def make_driver(options: Any) -> OpenCodeDriver:
    """Make the opencode driver from its options (see the module docstring).

    Raises:
        ValueError: an option is unknown or of the wrong type, or ``base_url`` without
            ``model``.
    """
    return OpenCodeDriver(check_agent_options("opencode", options))

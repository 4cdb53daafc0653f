"""The ``vibe`` driver: Mistral Vibe (PyPI ``mistral-vibe``, Python 3.12 or later) in its ACP
mode, ``vibe-acp``, through the ``acp`` driver (:mod:`bridge_client.drivers.acp_preset`). See
its page, :doc:`drivers/vibe`.

The agent runs in the workspace as::

    vibe-acp [EXTRA_ARGS...]

It asks (``session/request_permission``) before each shell command by itself.

With ``base_url`` the model server is an OpenAI-compatible one of your own: the driver writes
a Vibe home (``VIBE_HOME``) under the bridge's state directory whose ``config.toml`` names
that server as the provider ``bridge`` and ``model`` as its active model, with telemetry,
update checks and auto-update off; Vibe reads the key from the variable ``api_key_env``
names (default ``OPENAI_API_KEY``) in the session's environment, never from a file. A
``VIBE_HOME`` in the session's environment wins (its own configuration is then used).
Without ``base_url`` Vibe uses its own home (``~/.vibe``) and configuration.

Options (``agent_options``, a JSON object or null):
    executable: the program; given, it is run as is and never installed. Default:
        ``vibe-acp`` on ``PATH``, else the copy the template installed in its private venv.
    base_url: the OpenAI-compatible server (``http://127.0.0.1:8000/v1``).
    model: the model's id at that server (required with ``base_url``).
    api_key_env: the session's variable holding the key (default ``OPENAI_API_KEY``).
    extra_args: further arguments.
    permission, continue_prompt, interrupt_grace, start_timeout, max_agents,
        agent_idle_timeout: as for the
        ``acp`` driver (``permission`` defaults as :mod:`.acp_preset` says).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from typing import Any, Dict, List

from ..driver_options import check_agent_options
from .acp_preset import AcpPreset

__all__ = ["VibeDriver", "make_driver", "vibe_home"]


def _toml(value: str) -> str:
    return json.dumps(value)  # a JSON string is a TOML basic string


def vibe_home(base_url: str, model: str, api_key_env: str) -> str:
    """Write a Vibe home whose ``config.toml`` points at ``base_url`` and ``model`` (the key in
    the variable ``api_key_env``) under the bridge's state directory, once per triple; return
    the folder.

    Raises:
        OSError: the file cannot be written.
    """
    from . import STATE_DIR

    digest = hashlib.sha256(f"{base_url}\n{model}\n{api_key_env}".encode()).hexdigest()[:16]
    root = STATE_DIR or os.path.join(tempfile.gettempdir(), "bridge-client-vibe")
    home = os.path.join(root, "vibe", digest)
    os.makedirs(home, mode=0o700, exist_ok=True)
    config = "\n".join(
        [
            'active_model = "bridge"',
            "enable_telemetry = false",
            "enable_update_checks = false",
            "enable_auto_update = false",
            "",
            "[[providers]]",
            'name = "bridge"',
            f"api_base = {_toml(base_url)}",
            f"api_key_env_var = {_toml(api_key_env)}",
            'api_style = "openai"',
            'backend = "generic"',
            "",
            "[[models]]",
            f"name = {_toml(model)}",
            'provider = "bridge"',
            'alias = "bridge"',
            "",
        ]
    )
    path = os.path.join(home, "config.toml")
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(config)
    os.replace(tmp, path)
    return home


class VibeDriver(AcpPreset):
    """The Mistral Vibe agent (``agent_id`` ``"vibe"``); see the module docstring."""

    agent_id = "vibe"
    program = "vibe-acp"
    package = "mistral-vibe"
    version = "3.0.2"

    def agent_args(self, options: Dict[str, Any]) -> List[str]:
        """None: ``vibe-acp`` speaks ACP on its stdio as it is."""
        return []

    def agent_variables(self, options: Dict[str, Any]) -> Dict[str, str]:
        """``VIBE_HOME`` of the model server's configuration, with ``base_url``."""
        if not options.get("base_url"):
            return {}
        key_env = options.get("api_key_env") or "OPENAI_API_KEY"
        return {"VIBE_HOME": vibe_home(options["base_url"], options["model"], key_env)}


def make_driver(options: Any) -> VibeDriver:
    """Make the vibe driver from its options (see the module docstring).

    Raises:
        ValueError: an option is unknown or of the wrong type, or ``base_url`` without
            ``model``.
        OSError: its Vibe home cannot be written.
    """
    return VibeDriver(check_agent_options("vibe", options))

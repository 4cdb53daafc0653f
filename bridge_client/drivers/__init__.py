"""Built-in drivers: ``echo`` (deterministic, for demos, tests and benchmarks), ``shell``
(runs each prompt line as a command in the workspace), and the real coding agents ``openai``
(any OpenAI-compatible Chat Completions endpoint), ``claude-code`` (the Claude Code CLI),
``codex`` (the Codex CLI), ``gemini`` (the Gemini CLI), ``qwen`` (the Qwen Code CLI), ``pi``
(the pi coding agent) and ``acp`` (any agent that speaks the Agent Client Protocol), and named
ACP agents on the ``acp`` driver: ``opencode`` (OpenCode), ``copilot`` (the GitHub Copilot CLI)
and ``codex-acp`` (Zed's ACP agent for Codex), ``cline`` (the Cline CLI) and ``vibe`` (Mistral
Vibe); and ``aider`` (Aider, one run per turn, editing files through its edit blocks).

Each module has ``make_driver(agent_options) -> Driver``; the bridge program loads them by
name (``--driver echo``) through :data:`BUILTIN_DRIVERS`. The template steps that install the
agents' CLIs are host code: :func:`bridge_client.template.agent_cli_steps`.
"""

from __future__ import annotations

from typing import Dict, Optional

__all__ = ["BUILTIN_DRIVERS", "STATE_DIR"]

BUILTIN_DRIVERS: Dict[str, str] = {
    "echo": "bridge_client.drivers.echo:make_driver",
    "shell": "bridge_client.drivers.shell:make_driver",
    "openai": "bridge_client.drivers.openai_chat:make_driver",
    "claude-code": "bridge_client.drivers.claude_code:make_driver",
    "codex": "bridge_client.drivers.codex:make_driver",
    "gemini": "bridge_client.drivers.gemini:make_driver",
    "qwen": "bridge_client.drivers.qwen:make_driver",
    "pi": "bridge_client.drivers.pi:make_driver",
    "acp": "bridge_client.drivers.acp:make_driver",
    "opencode": "bridge_client.drivers.opencode:make_driver",
    "copilot": "bridge_client.drivers.copilot:make_driver",
    "codex-acp": "bridge_client.drivers.codex_acp:make_driver",
    "cline": "bridge_client.drivers.cline:make_driver",
    "vibe": "bridge_client.drivers.vibe:make_driver",
    "aider": "bridge_client.drivers.aider:make_driver",
}
"""Driver name to its factory, as ``MODULE:CALLABLE``."""

STATE_DIR: Optional[str] = None
"""The bridge's state directory, set by the bridge program before it makes its driver (the
CLI drivers look for their private installs next to it); ``None`` outside a bridge."""

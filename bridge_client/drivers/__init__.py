"""Built-in drivers: ``echo`` (deterministic, for demos, tests and benchmarks), ``shell``
(runs each prompt line as a command in the workspace), and the real coding agents ``openai``
(any OpenAI-compatible Chat Completions endpoint), ``claude-code`` (the Claude Code CLI) and
``codex`` (the Codex CLI).

Each module has ``make_driver(agent_options) -> Driver``; the bridge program loads them by
name (``--driver echo``) through :data:`BUILTIN_DRIVERS`. This package's ``__init__`` imports
nothing of the bridge, so host code may read it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, Tuple

if TYPE_CHECKING:  # pragma: no cover
    from ..template import TemplateStep

__all__ = ["BUILTIN_DRIVERS", "driver_template_steps"]

BUILTIN_DRIVERS: Dict[str, str] = {
    "echo": "bridge_client.drivers.echo:make_driver",
    "shell": "bridge_client.drivers.shell:make_driver",
    "openai": "bridge_client.drivers.openai_chat:make_driver",
    "claude-code": "bridge_client.drivers.claude_code:make_driver",
    "codex": "bridge_client.drivers.codex:make_driver",
}
"""Driver name to its factory, as ``MODULE:CALLABLE``."""

_NPM_CLIS: Dict[str, Tuple[str, str, str]] = {
    "claude-code": ("the Claude Code CLI (claude)", "claude", "@anthropic-ai/claude-code"),
    "codex": ("the Codex CLI (codex)", "codex", "@openai/codex"),
}


def driver_template_steps(driver: str) -> "Tuple[TemplateStep, ...]":
    """The template steps a built-in driver needs besides the bridge program (C01, C04).

    ``claude-code`` and ``codex`` need their CLI: the check is ``command -v PROGRAM``, and
    only when it fails the install runs ``npm install -g PACKAGE`` (so a sandbox that has the
    CLI, from its image or an earlier run, keeps it as it is). Other drivers need nothing.

    Args:
        driver: a driver name (``"claude-code"``) or ``MODULE:CALLABLE``.

    Returns:
        The steps (empty for drivers that need none).
    """
    from ..template import TemplateStep

    if driver not in _NPM_CLIS:
        return ()
    name, program, package = _NPM_CLIS[driver]
    return (
        TemplateStep(
            name=name,
            check=("/bin/sh", "-c", f"command -v {program}"),
            install=("npm", "install", "-g", "--no-fund", "--no-audit", package),
        ),
    )

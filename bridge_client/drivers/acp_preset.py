"""A named agent's driver built on the ``acp`` driver: the agent's own command, its private
install, and the environment and arguments that point it at a model server, over
:class:`~bridge_client.drivers.acp.AcpDriver`, which does the rest (the session, the
prompt turn, permission requests, messages to a running turn, cancel, restarts).

Each preset is a subclass that names its CLI (``program``, npm ``package`` and the
``version`` the template installs, see :func:`~bridge_client.drivers.cli_install.find_cli`)
and says how to run it in ACP mode (:meth:`AcpPreset.agent_args`) and with which variables
(:meth:`AcpPreset.agent_variables`); the session's own environment is laid over those
variables, so a session can override any of them.

Permission requests: each preset makes its CLI ask before it runs a shell command (the
CLI's own setting, where it has one). With approvals on the host answers (see the *ACP
driver* page, :doc:`drivers/acp`); with approvals off the ``permission`` policy answers:
``allow`` by default in an isolated sandbox (a container, as the template records),
``reject`` elsewhere (a ``LocalSandbox``: the agent's commands would run as you).

Host tools: the ``acp`` driver passes the MCP server named ``host`` in ``session/new``; a
preset whose CLI ignores those names it in the CLI's own way (``agent_command``: copilot's
``--additional-mcp-config``, cline's MCP settings file). A preset offers them where its CLI
was shown to call them (``supports_host_tools``: opencode, codex-acp, copilot, cline); the
others refuse a session with tools (``ToolsUnsupported``; why, in the *Host tools* guide's
table).
"""

from __future__ import annotations

from typing import Any, Dict, List

from .acp import AcpDriver
from .cli_install import find_cli, sandbox_isolated

__all__ = ["AcpPreset", "PASSED_OPTIONS"]

PASSED_OPTIONS = (
    "permission", "continue_prompt", "interrupt_grace", "start_timeout", "max_agents", "agent_idle_timeout"
)
"""The options a preset passes to the ``acp`` driver as they are (their meaning is its)."""


class AcpPreset(AcpDriver):
    """An ACP agent CLI run by its name (a subclass per agent; see the module docstring).

    Args:
        options: the driver's checked options (``driver_options.check_agent_options``):
            ``executable``, ``extra_args``, the :data:`PASSED_OPTIONS`, and the preset's
            own, which :meth:`agent_args` and :meth:`agent_variables` read.

    Attributes:
        executable: the program run (the ``executable`` option, else the CLI on ``PATH``,
            else the template's private install).
        isolated: whether the sandbox is isolated (the template's record).
    """

    agent_id = "acp-preset"
    program = ""
    package = ""
    version = ""
    supports_host_tools = False  # a preset whose CLI was shown to call them says True

    def __init__(self, options: Dict[str, Any]) -> None:
        self.executable: str = find_cli(self.program, self.package, self.version, options.get("executable"))
        self.isolated = sandbox_isolated()
        acp: Dict[str, Any] = {key: options[key] for key in PASSED_OPTIONS if key in options}
        acp.setdefault("permission", "allow" if self.isolated else "reject")
        acp["command"] = self.executable
        acp["args"] = [*self.agent_args(options), *(options.get("extra_args") or [])]
        super().__init__(acp)
        self.preset_env = self.agent_variables(options)

    def agent_args(self, options: Dict[str, Any]) -> List[str]:
        """The CLI's arguments that start its ACP mode (before ``extra_args``)."""
        raise NotImplementedError

    def agent_variables(self, options: Dict[str, Any]) -> Dict[str, str]:
        """The variables the agent gets under the session's environment (default none)."""
        return {}

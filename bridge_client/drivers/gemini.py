"""The ``gemini`` driver: runs the Gemini CLI (npm ``@google/gemini-cli``) headless inside the
sandbox and maps its stream-json events onto parts.

Each turn runs, in the workspace::

    gemini --output-format stream-json [--resume SESSION_ID] [--model M]
           [--approval-mode MODE] [EXTRA_ARGS...] --prompt PROMPT

(stdin is closed at once). The model endpoint comes from the CLI's own configuration: an API
key (``GEMINI_API_KEY``), the auth type chosen in its ``settings.json``, and, for another
server, ``GOOGLE_GEMINI_BASE_URL``.

Where the format comes from: the CLI's ``JsonStreamEventType`` (``packages/core``, output of
``--output-format stream-json``), one JSON object per line.

What each event becomes:

- ``init``: its ``session_id`` goes into the session state (``{"session_id": ...}``).
- ``message`` of the ``assistant``: ``text-delta`` (its ``content``); the user's echo is
  skipped.
- ``tool_use``: ``tool-call`` (``tool_id``, ``tool_name``, ``parameters``).
- ``tool_result``: ``tool-result`` (``output``, or the error's message; an error unless
  ``status`` is ``success``).
- ``error``: ``data`` ``gemini-error`` (warnings and errors the CLI reports and goes on).
- ``result``: closes the open step; ``stats`` become the turn's usage; ``status`` ``error``
  ends the turn with ``error`` and the CLI's message.
- A line that is not JSON: ``data`` ``gemini-unparsed``; the turn goes on.

Steps: the stream has no model-call ids, so a step is what the model says until its tools
have run: a step opens at the first event, and the first text or tool call after tool
results closes it and opens the next.

Cancel: SIGINT to the CLI's process group; it is killed ``interrupt_grace`` seconds later.

What survives a restart: the session state holds the CLI's session id, resumed with
``--resume``; a turn continued after a restart with completed steps resumes it with
``continue_prompt``, one with none runs its prompt again.

Options (``agent_options``, a JSON object or null):
    executable: the CLI program; given, it is run as is and never installed. Default:
        ``gemini`` on ``PATH``, else the copy the template installed in the sandbox's
        private prefix (:doc:`drivers/gemini`).
    model: ``--model`` (default: the CLI's).
    approval_mode: ``--approval-mode`` (``default``, ``auto_edit``, ``yolo``, ``plan``).
        Default: ``yolo`` in an isolated sandbox (a container, as the template records: it
        is the boundary); elsewhere (a ``LocalSandbox``) none, so the CLI's own approval
        checks apply unless you ask.
    extra_args: a list of further arguments.
    continue_prompt: the prompt that continues a turn cut by a restart.
    interrupt_grace: seconds >= 0 between SIGINT and killing the CLI (default 5).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ..bridge.driver import TurnContext, TurnResult
from ..driver_options import check_agent_options
from .claude_code import DEFAULT_CONTINUE_PROMPT
from .cli_install import find_cli, sandbox_isolated
from .cli_process import CLIRuns, CLIStartError, Event, JsonLinesProcess
from .cli_process import keep_session_id, summarize
from .cli_tools_once import CLITools, resume_turn
from .workspace import workspace_dir
from . import gemini_host, mcp_config

__all__ = ["GeminiDriver", "make_driver"]


class _Mapper:
    """Maps one run's events onto ``ctx``."""

    def __init__(self, ctx: TurnContext, tools: CLITools) -> None:
        self.ctx = ctx
        self.tools = tools  # journals each call and result first (.cli_tools_once)
        self.names: Dict[str, str] = {}
        self.after_results = False
        self.step_tools = False
        self.result: Optional[Dict[str, Any]] = None

    def _open(self, new_output: bool) -> None:
        # New model output after the step's tool results: that step is over.
        if self.ctx.step is not None and new_output and self.after_results:
            self.close_step()
        if self.ctx.step is None:
            self.ctx.start_step()
            self.after_results = self.step_tools = False

    def close_step(self, reason: Optional[str] = None) -> None:
        if self.ctx.step is not None:
            self.ctx.finish_step(reason or ("tool-calls" if self.step_tools else "stop"))

    def on_event(self, event: Event) -> bool:
        """Map one line; return True for the ``result`` event."""
        ctx, ev = self.ctx, event.obj
        if ev is None:
            ctx.data("gemini-unparsed", {"line": event.line[:2000]})
            return False
        kind = ev.get("type")
        if kind == "init":
            keep_session_id(ctx, "session_id", ev.get("session_id"))
        elif kind == "message" and ev.get("role") == "assistant" and isinstance(ev.get("content"), str):
            self._open(True)
            if ev["content"]:
                ctx.text(ev["content"])
        elif kind == "tool_use":
            self._open(True)
            call_id, name = str(ev.get("tool_id", "")), str(ev.get("tool_name", "unknown"))
            self.names[call_id] = name
            self.step_tools = True
            self.tools.call(call_id, name, ev.get("parameters"))
        elif kind == "tool_result":
            self._open(False)
            call_id = str(ev.get("tool_id", ""))
            error = ev.get("error")
            failed = ev.get("status") != "success"
            output = ev.get("output")
            if output is None and isinstance(error, dict):
                output = error.get("message")
            name = self.names.get(call_id, "unknown")
            self.tools.result(call_id, name, output if output is not None else "", failed)
            self.after_results = True
        elif kind == "error":
            self._open(False)
            ctx.data("gemini-error", {k: ev.get(k) for k in ("severity", "message")})
        elif kind == "result":
            self.result = ev
            self.close_step("error" if ev.get("status") == "error" else None)
            return True
        return False


class GeminiDriver:
    """The Gemini CLI agent (``agent_id`` ``"gemini"``); see the module docstring.

    Args:
        options: the checked options (see :func:`make_driver`).
    """

    agent_id = "gemini"
    supports_approvals = False  # headless, it cannot ask (its ACP mode can: the ``acp`` driver)
    supports_messages = False
    program = "gemini"
    package = "@google/gemini-cli"
    version = "0.61.0"

    def __init__(self, options: Dict[str, Any]) -> None:
        self.executable: str = find_cli(self.program, self.package, self.version, options.get("executable"))
        self.model: Optional[str] = options.get("model")
        default_mode = "yolo" if sandbox_isolated() else None
        self.approval_mode: Optional[str] = options.get("approval_mode", default_mode)
        self.extra_args: List[str] = list(options.get("extra_args") or [])
        self.continue_prompt: str = options.get("continue_prompt") or DEFAULT_CONTINUE_PROMPT
        self.interrupt_grace: float = float(options.get("interrupt_grace", 5.0))
        self._runs = CLIRuns()

    def initial_state(self) -> Any:
        """A new session's data: ``{"session_id": null}`` (no CLI session yet)."""
        return {"session_id": None}

    def argv(self, session_id: Optional[str], prompt: str) -> List[str]:
        """The command line of one run (``session_id``: the CLI session to resume)."""
        argv = [self.executable, "--output-format", "stream-json"]
        if session_id:
            argv += ["--resume", session_id]
        if self.model:
            argv += ["--model", self.model]
        if self.approval_mode:
            argv += ["--approval-mode", self.approval_mode]
        return argv + self.extra_args + ["--prompt", prompt]

    @property
    def supports_host_tools(self) -> bool:
        """Host tools through its system settings file (:mod:`.gemini_host`): a bridge that
        runs as root."""
        return gemini_host.available()

    @property
    def host_tools_refusal(self) -> Optional[str]:
        """Why :attr:`supports_host_tools` is false here, with the fix (``None``: it is true)."""
        return gemini_host.unavailable_reason()

    def run_turn(self, ctx: TurnContext) -> TurnResult:
        """:meth:`_run_turn` with the session's host tools' MCP server, if any."""
        with mcp_config.host_mcp(ctx), gemini_host.host_settings():
            return self._run_turn(ctx)

    def _run_turn(self, ctx: TurnContext) -> TurnResult:
        """Run the CLI once for the turn (or resume its session after a restart).

        Returns:
            ``stop`` with the run's stats; ``error`` when the CLI reports one, cannot be
            started, or exits before its ``result`` event; ``cancelled`` after a cancel.
        """
        session_id, prompt, tools = resume_turn(ctx, "session_id", self.continue_prompt, self.agent_id)
        try:
            argv, env = self.argv(session_id, prompt), gemini_host.settings_env()  # host tools, if any
            proc = JsonLinesProcess(argv, workspace_dir(), env=env)
        except CLIStartError as exc:
            hint = "is the Gemini CLI installed? the gemini template installs it"
            return TurnResult("error", error=f"{exc} ({hint})")
        mapper = _Mapper(ctx, tools)
        early = self._runs.run(proc, ctx.cancelled, mapper.on_event, self.interrupt_grace)
        if early is not None:
            mapper.close_step("error")
            return TurnResult("error", error=early.error("gemini", "its result event", early.stderr_tail))
        mapper.close_step()
        tools.finished()
        if ctx.cancelled.is_set():
            return TurnResult("cancelled")
        result = mapper.result or {}
        usage = result.get("stats") if isinstance(result.get("stats"), dict) else None
        if result.get("status") == "error":
            error = result.get("error")
            detail = error.get("message") if isinstance(error, dict) else error
            return TurnResult("error", usage, f"gemini: {summarize(detail or 'the run failed')}")
        return TurnResult("stop", usage)

    def close(self) -> None:
        """Kill every running CLI's process group (the bridge is shutting down)."""
        self._runs.stop_all()


def make_driver(options: Any) -> GeminiDriver:
    """Make the gemini driver from its options (see the module docstring).

    Raises:
        ValueError: an option is unknown or of the wrong type.
    """
    return GeminiDriver(check_agent_options("gemini", options))

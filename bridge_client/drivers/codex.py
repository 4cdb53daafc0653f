"""The ``codex`` driver: runs the Codex CLI's non-interactive mode with JSON events inside the
sandbox and maps them onto parts.

Each turn runs, in the workspace, with the prompt on stdin::

    codex exec --json [--skip-git-repo-check] [--sandbox MODE] [--model M] [EXTRA_ARGS...] -
    codex exec --json [same options] resume THREAD_ID -        (later turns)

Where the format comes from: ``openai/codex``, ``codex-rs/exec/src/exec_events.rs`` (the
``ThreadEvent`` and ``ThreadItem`` types ``codex exec --json`` prints, one per line) and
``codex-rs/exec/src/cli.rs`` (the ``exec`` options and the ``resume SESSION_ID [PROMPT]``
subcommand; a prompt of ``-`` is read from stdin).

What each event becomes:

- ``thread.started``: its ``thread_id`` goes into the session state (``{"thread_id": ...}``,
  a ``session-state`` part).
- ``turn.started``: nothing.
- Items. A step opens at the first item after the previous step closed, and closes after
  each tool item completes (the model call that asked for the tool, and its result):
  ``agent_message`` → ``text-delta``; ``reasoning`` → ``reasoning-delta``;
  ``command_execution`` → ``tool-call`` ``command_execution`` (``{"command"}``) when it
  starts, ``tool-result`` (``{"exitCode", "output", "status"}``, an error unless it
  completed with status 0) when it completes; ``file_change`` → ``tool-call`` and
  ``tool-result`` ``file_change`` (``{"changes"}``); ``mcp_tool_call`` → ``tool-call``
  ``mcp:SERVER/TOOL`` (its ``arguments``) and ``tool-result`` (``result`` or ``error``);
  ``web_search`` → ``tool-call`` ``web_search`` and an empty ``tool-result``;
  ``todo_list``, ``plan``, ``error`` and other items → ``data`` ``codex-<type>``.
- ``turn.completed``: closes the open step; its ``usage`` is the turn's usage.
- ``turn.failed``: ``turn-finish`` ``error`` with its ``error.message``.
- ``error``: ``data`` ``codex-error`` (Codex also reports retries this way); its message is
  kept for the turn's error if the turn then fails.
- A line that is not JSON → ``data`` ``codex-unparsed`` (``{"line": ...}``); the turn goes on.
- The CLI exiting without ``turn.completed`` or ``turn.failed`` → ``turn-finish`` ``error``
  with its exit status and the tail of its stderr.

Cancel: SIGINT to the CLI's process group (what Ctrl-C does: Codex interrupts its turn and
exits); the group is killed when it has not ended ``interrupt_grace`` seconds later.

What survives a restart: the session state holds the thread id, so a fresh bridge
resumes the same Codex thread (``resume``). A turn continued after a restart with completed
steps resumes the thread with ``continue_prompt``; one with none runs its prompt again.

Options (``agent_options``, a JSON object or null):
    executable: the CLI program; given, it is run as is and never installed. Default:
        ``codex`` on ``PATH``, else the copy the template installed in the sandbox's private
        prefix (:doc:`drivers/codex`).
    model: ``--model`` (default: the CLI's).
    sandbox: ``--sandbox`` mode. Default: ``workspace-write`` (Codex's own sandbox: its
        commands may write only in the workspace), also on a ``LocalSandbox``; in an
        isolated sandbox (a container, as the template records) ``danger-full-access`` (the
        container is the boundary, and Codex's sandbox often cannot start inside one).
        ``danger-full-access`` elsewhere only when you ask for it; ``null`` leaves the CLI's
        default (``read-only``).
    skip_git_repo_check: pass ``--skip-git-repo-check`` (default true: workspaces need not
        be git repositories).
    extra_args: a list of further arguments (before ``resume``).
    continue_prompt: the prompt that continues a turn cut by a restart.
    interrupt_grace: seconds >= 0 between SIGINT and killing the CLI (default 5).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Set

from ..bridge.driver import TurnContext, TurnResult
from ..driver_options import check_agent_options
from .claude_code import DEFAULT_CONTINUE_PROMPT
from . import mcp_config, transcripts
from .cli_install import find_cli, sandbox_isolated
from .cli_process import CLIRuns, CLIStartError, Event, JsonLinesProcess
from .cli_process import keep_session_id, summarize
from .cli_tools_once import CLITools, resume_turn
from .workspace import workspace_dir

__all__ = ["CodexDriver", "make_driver"]

_TOOL_ITEMS = ("command_execution", "file_change", "mcp_tool_call", "web_search", "collab_tool_call")


class _Mapper:
    """Maps one run's events onto ``ctx``."""

    def __init__(self, ctx: TurnContext, tools: CLITools) -> None:
        self.ctx = ctx
        self.tools = tools  # journals each call and result first (.cli_tools_once)
        self.called: Set[str] = set()
        self.usage: Any = None
        self.failed: Optional[str] = None
        self.last_error: Optional[str] = None
        self.done = False

    def _open(self) -> None:
        if self.ctx.step is None:
            self.ctx.start_step()

    def close_step(self, reason: str = "stop") -> None:
        if self.ctx.step is not None:
            self.ctx.finish_step(reason)

    def on_event(self, event: Event) -> bool:
        """Map one line; return True for ``turn.completed`` or ``turn.failed``."""
        ctx, ev = self.ctx, event.obj
        if ev is None:
            ctx.data("codex-unparsed", {"line": event.line[:2000]})
            return False
        kind = ev.get("type")
        if kind == "thread.started":
            keep_session_id(ctx, "thread_id", ev.get("thread_id"))
        elif kind == "turn.completed":
            self.close_step()
            self.usage = ev.get("usage")
            self.done = True
            return True
        elif kind == "turn.failed":
            error = ev.get("error")
            message = error.get("message") if isinstance(error, dict) else None
            self.failed = str(message or self.last_error or "turn failed")
            self.close_step("error")
            return True
        elif kind == "error":
            self.last_error = str(ev.get("message", ""))
            ctx.data("codex-error", {"message": self.last_error})
        elif kind in ("item.started", "item.updated", "item.completed") and isinstance(ev.get("item"), dict):
            self._item(kind, ev["item"])
        return False

    def _call(self, item_id: str, name: str, input: Any) -> None:
        if item_id not in self.called:
            self.called.add(item_id)
            self.tools.call(item_id, name, input)

    def _item(self, kind: str, item: Dict[str, Any]) -> None:
        ctx = self.ctx
        itype = str(item.get("type", "unknown"))
        item_id = str(item.get("id", ""))
        if itype in _TOOL_ITEMS:
            self._open()
            name, input = _tool_name_input(itype, item)
            self._call(item_id, name, input)
            if kind == "item.completed":
                output, is_error = _tool_output(itype, item)
                self.tools.result(item_id, name, output, is_error)
                self.close_step("tool-calls")
            return
        if kind != "item.completed" and itype in ("agent_message", "reasoning"):
            return  # their text arrives whole when they complete
        self._open()
        text = item.get("text")
        if itype == "agent_message" and isinstance(text, str):
            ctx.text(text)
        elif itype == "reasoning" and isinstance(text, str):
            ctx.reasoning(text)
        else:
            ctx.data(f"codex-{itype}", item)


def _tool_name_input(itype: str, item: Dict[str, Any]) -> "tuple[str, Any]":
    if itype == "command_execution":
        return itype, {"command": item.get("command")}
    if itype == "file_change":
        return itype, {"changes": item.get("changes")}
    if itype == "mcp_tool_call":
        return f"mcp:{item.get('server')}/{item.get('tool')}", item.get("arguments")
    if itype == "web_search":
        return itype, {"query": item.get("query")}
    return itype, {k: v for k, v in item.items() if k not in ("id", "type", "status", "agents_states")}


def _tool_output(itype: str, item: Dict[str, Any]) -> "tuple[Any, bool]":
    status = item.get("status")
    if itype == "command_execution":
        code = item.get("exit_code")
        output = {"exitCode": code, "output": item.get("aggregated_output", ""), "status": status}
        return output, status != "completed" or code != 0
    if itype == "file_change":
        return {"changes": item.get("changes"), "status": status}, status == "failed"
    if itype == "mcp_tool_call":
        error = item.get("error")
        if error:
            return {
                "error": error.get("message") if isinstance(error, dict) else error,
                "status": status,
            }, True
        return {"result": item.get("result"), "status": status}, status == "failed"
    if itype == "web_search":
        return {"status": status or "completed"}, False
    return {"status": status, "agentsStates": item.get("agents_states")}, status == "failed"


class CodexDriver:
    """The Codex agent (``agent_id`` ``"codex"``); see the module docstring.

    Args:
        options: the checked options (see :func:`make_driver`).
    """

    agent_id = "codex"
    supports_approvals = False  # ``codex exec`` never asks (nothing to answer on its stdin)
    supports_messages = False
    supports_host_tools = True  # through the MCP server named host (drivers.mcp_config)
    program = "codex"
    package = "@openai/codex"
    version = "0.171.0"

    export_files, import_files = transcripts.codex_export_files, transcripts.codex_import_files

    def __init__(self, options: Dict[str, Any]) -> None:
        self.executable: str = find_cli(self.program, self.package, self.version, options.get("executable"))
        self.model: Optional[str] = options.get("model")
        default_sandbox = "danger-full-access" if sandbox_isolated() else "workspace-write"
        self.sandbox: Optional[str] = options.get("sandbox", default_sandbox)
        self.skip_git_repo_check: bool = options.get("skip_git_repo_check", True)
        self.extra_args: List[str] = list(options.get("extra_args") or [])
        self.continue_prompt: str = options.get("continue_prompt") or DEFAULT_CONTINUE_PROMPT
        self.interrupt_grace: float = float(options.get("interrupt_grace", 5.0))
        self._runs = CLIRuns()

    def initial_state(self) -> Any:
        """A new session's data: ``{"thread_id": null}`` (no Codex thread yet)."""
        return {"thread_id": None}

    def argv(self, thread_id: Optional[str]) -> List[str]:
        """The command line of one run (``thread_id``: the thread to resume); the prompt is
        read from stdin (``-``)."""
        argv = [self.executable, "exec", "--json"]
        if self.skip_git_repo_check:
            argv.append("--skip-git-repo-check")
        if self.sandbox:
            argv += ["--sandbox", self.sandbox]
        if self.model:
            argv += ["--model", self.model]
        argv += mcp_config.codex_args() + self.extra_args  # the host tools' MCP server, if any
        if thread_id:
            argv += ["resume", thread_id]
        return argv + ["-"]

    def run_turn(self, ctx: TurnContext) -> TurnResult:
        """Run the CLI once for the turn (or resume its thread after a restart), with the
        session's host tools' MCP server; returns as ``_run_turn`` does."""
        with mcp_config.host_mcp(ctx):
            return self._run_turn(ctx)

    def _run_turn(self, ctx: TurnContext) -> TurnResult:
        """Run the CLI once for the turn (or resume its thread after a restart).

        Returns:
            ``stop`` with the turn's usage; ``error`` for ``turn.failed``, a CLI that cannot
            be started, or one that exits before the end of its turn; ``cancelled``.
        """
        thread_id, prompt, tools = resume_turn(ctx, "thread_id", self.continue_prompt, self.agent_id)
        try:
            proc = JsonLinesProcess(self.argv(thread_id), workspace_dir(), prompt)
        except CLIStartError as exc:
            return TurnResult(
                "error", error=f"{exc} (is the Codex CLI installed? the codex template installs it)"
            )
        mapper = _Mapper(ctx, tools)
        early = self._runs.run(proc, ctx.cancelled, mapper.on_event, self.interrupt_grace)
        if early is not None:
            mapper.close_step("error")
            tail = early.stderr_tail or mapper.last_error or ""
            return TurnResult("error", error=early.error("codex", "the end of its turn", tail))
        mapper.close_step()
        tools.finished()
        if ctx.cancelled.is_set():
            return TurnResult("cancelled")
        if mapper.failed is not None:
            return TurnResult("error", mapper.usage, f"codex: {summarize(mapper.failed)}")
        return TurnResult("stop", mapper.usage)

    def close(self) -> None:
        """Kill every running CLI's process group (the bridge is shutting down)."""
        self._runs.stop_all()


def make_driver(options: Any) -> CodexDriver:
    """Make the codex driver from its options (see the module docstring).

    Raises:
        ValueError: an option is unknown or of the wrong type.
    """
    opts = check_agent_options("codex", options)  # the same check bridge_options() makes
    return CodexDriver(opts)

"""The ``claude-code`` driver: runs the Claude Code CLI in print mode inside the sandbox and
maps its stream-json messages onto parts.

Each turn runs::

    claude -p --output-format stream-json --verbose --input-format stream-json
           [--resume SESSION_ID] [--model M] [--permission-mode P] [--max-turns N]
           [--append-system-prompt S] [--allowedTools T,...] [--include-partial-messages]
           [EXTRA_ARGS...]

in the workspace, writes the prompt to stdin as one stream-json user message, and keeps stdin
open for control messages. After the ``result`` message the process is kept warm
(:mod:`bridge_client.drivers.warm_cli`): the session's next turn writes its prompt to the same
process (the host tools' MCP server, and its relay, live as long as the process). A turn after
a cancelled or failed one, after a restart, or with another environment or approvals starts a
new process with ``--resume``.

Where the format comes from: the message shapes parsed by the Claude Agent SDK,
``anthropics/claude-agent-sdk-python``, ``src/claude_agent_sdk/_internal/message_parser.py``
(``system``/``init``, ``assistant`` with ``message.content`` blocks ``text``, ``thinking``,
``tool_use``, ``user`` with ``tool_result`` blocks, ``result`` with ``subtype``, ``is_error``,
``session_id``, ``usage``, ``total_cost_usd``), and the command line and stdin messages its
transport sends (``src/claude_agent_sdk/_internal/transport/subprocess_cli.py``: the user
message ``{"type": "user", "message": {"role": "user", "content": ...}}`` and the interrupt
``{"type": "control_request", "request_id": ..., "request": {"subtype": "interrupt"}}``).

What each message becomes:

- ``system`` ``init``: its ``session_id`` goes into the session state
  (``{"session_id": ...}``, a ``session-state`` part) before the first step.
- ``stream_event`` (with ``--include-partial-messages``, the default): ``message_start``
  closes the open step and opens the next (one step per model call); ``text_delta`` and
  ``thinking_delta`` → ``text-delta`` and ``reasoning-delta`` as the model writes them; the
  ``text`` and ``thinking`` blocks of the step's assistant messages are then not repeated.
- ``assistant``: without stream events, a message with a new ``message.id`` closes the open
  step and opens the next. Its blocks: ``text`` → ``text-delta``; ``thinking`` →
  ``reasoning-delta``; ``tool_use`` → ``tool-call`` (its ``id``, ``name`` and ``input``);
  other blocks → ``data`` ``claude-code-block``. Messages of a sub-agent
  (``parent_tool_use_id`` set) → ``data`` ``claude-code-subagent``.
- ``user`` ``tool_result`` blocks → ``tool-result`` (the text of ``content``, ``is_error``).
- ``result``: closes the open step; its ``usage``, ``total_cost_usd``, ``num_turns`` and
  ``duration_ms`` become the turn's usage; ``is_error`` or a ``subtype`` other than
  ``success`` ends the turn with ``error`` and the CLI's message.
- A line that is not JSON → ``data`` ``claude-code-unparsed`` (``{"line": ...}``); the turn
  goes on. ``system`` ``api_retry`` (the CLI retrying a failed model request: a wrong key or
  base URL) → ``data`` ``claude-code-retry`` (``attempt``, ``max_retries``,
  ``retry_delay_ms``, ``error_status``, ``error``). Other message types
  (``rate_limit_event``, other ``system`` subtypes, other stream events) are skipped.
- The CLI exiting before its ``result`` message → ``turn-finish`` ``error`` with its exit
  status and the tail of its stderr.

Interactive turns (see the *Interactive turns* guide, :doc:`interactive`, and
:mod:`bridge_client.drivers.stream_control`): with approvals on, the run gets
``--permission-prompt-tool stdio`` (and no ``bypassPermissions``, which would ask nothing);
each ``can_use_tool`` control request the CLI sends is asked of the host
(``approval-request``, title e.g. ``Bash: rm -rf build``) and answered with a
``control_response`` (allow, or deny with the user's message); allow-always also hands the
CLI its own ``permission_suggestions`` for the rest of the run, kept in its session, never
in the workspace's settings. Messages sent to the running turn are written to stdin as
stream-json user messages (``data`` parts ``claude-code-message`` follow their progress);
the CLI gives each to the model with the next tool result, or as its next turn when the
model had finished, and the bridge's turn ends at the ``result`` after which no message
is left.

Cancel: the interrupt control request on stdin; the CLI's process group is killed when it
has not ended ``interrupt_grace`` seconds later.

What survives a restart: the session state holds the CLI's session id, so a fresh
bridge resumes the same Claude Code session (``--resume``). A turn continued after a restart
with completed steps resumes that session with ``continue_prompt``; one with none runs its
prompt again. A tool call of the cut step whose result was logged is not run again: it is
given back, and one that was running is named (:mod:`bridge_client.drivers.cli_tools_once`).
When the CLI's own checks refuse a tool while approvals are off, a ``data`` part
``claude-code-permission-refused`` says which setting refused it
(:mod:`bridge_client.drivers.claude_stream`).

Options (``agent_options``, a JSON object or null):
    executable: the CLI program; given, it is run as is and never installed. Default:
        ``claude`` on ``PATH``, else the copy the template installed in the sandbox's private
        prefix (:doc:`drivers/claude-code`).
    model: ``--model`` (default: the CLI's).
    permission_mode: ``--permission-mode`` (``bypassPermissions`` is left out while
        approvals are on). Default: in an isolated sandbox (a container, as
        the template records), ``bypassPermissions`` (the container is the boundary;
        ``IS_SANDBOX=1`` is set for the CLI so that it accepts this as root); elsewhere (a
        ``LocalSandbox``: no isolation) none, so the CLI's own permission checks apply (in
        print mode they refuse the tools that need approval, such as ``Bash``) unless you
        ask for ``bypassPermissions`` or another mode.
    max_turns: ``--max-turns``, an integer >= 1.
    append_system_prompt: ``--append-system-prompt``.
    allowed_tools: a list of tool names for ``--allowedTools``.
    include_partial_messages: pass ``--include-partial-messages`` (default true), so text and
        thinking stream as the model writes them and each model call is one step.
    extra_args: a list of further arguments.
    continue_prompt: the prompt that continues a turn cut by a restart.
    interrupt_grace: seconds >= 0 between the interrupt and killing the CLI (default 5).
    agent_idle_timeout: seconds > 0 a warm CLI process may stay unused before it is stopped
        (default 600), or null: kept until the session closes or the bridge exits.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Dict, Hashable, List, Optional, Tuple

from ..bridge.driver import TurnContext, TurnResult, process_group_started
from ..bridge.host_calls import host_tools
from ..driver_options import check_agent_options
from . import mcp_config, transcripts
from .mcp_config import AgentRelay
from .cli_install import find_cli, sandbox_isolated
from .claude_stream import StreamMapper
from .cli_process import CLIRuns, CLIStartError, EarlyExit, Event, JsonLinesProcess, summarize
from .cli_tools_once import CLITools, resume_turn
from .idle_reaper import DEFAULT_IDLE_TIMEOUT
from .stream_control import StreamControl, initialize_request
from .warm_cli import Warm, WarmPool
from .workspace import workspace_dir

__all__ = ["ClaudeCodeDriver", "StreamJsonDriver", "make_driver", "DEFAULT_CONTINUE_PROMPT"]

log = logging.getLogger("bridge_client.drivers.claude_code")

DEFAULT_CONTINUE_PROMPT = (
    "Your previous run was interrupted (the process running you restarted). "
    "Continue the task where you left off."
)
"""What a turn continued after a restart sends to the resumed session."""

_ROOT_HINT = (
    " (the bridge runs as root, where claude refuses the skipped permission checks of"
    " permission_mode bypassPermissions: in a sandbox where that is safe, start the bridge"
    " with IS_SANDBOX=1 in its environment, or choose another permission_mode)"
)


_KEY_HINT = (
    " (claude reads ANTHROPIC_API_KEY from the session's environment: bridge-client run --env"
    " ANTHROPIC_API_KEY, or CreateSessionOptions(env=...); else from the bridge's own, the"
    " environment it was launched with, which a key exported later does not reach)"
)


class StreamJsonDriver:
    """A CLI that speaks Claude Code's stream-json on stdin and stdout (Claude Code itself,
    Qwen Code); subclasses say how to run it. See the module docstring.

    Class attributes: ``agent_id``; ``program``, ``package`` and ``version`` (the CLI, its
    npm package and the version the template installs); ``label`` (its name in messages).
    """

    agent_id = "claude-code"
    program = "claude"
    package = "@anthropic-ai/claude-code"
    version = "2.1.332"
    label = "claude"
    install_hint = "is Claude Code installed? the claude-code template installs it"
    supports_approvals = True
    supports_messages = False
    initialize_for_approvals = False
    """Send the ``initialize`` control request first when approvals are on (Qwen Code asks
    only after it)."""
    permission_updates = False
    """Allow-always answers carry the CLI's ``permission_suggestions`` (Claude Code's shape)."""

    def __init__(self, options: Dict[str, Any]) -> None:
        self.executable: str = find_cli(self.program, self.package, self.version, options.get("executable"))
        self.model: Optional[str] = options.get("model")
        self.append_system_prompt: Optional[str] = options.get("append_system_prompt")
        self.extra_args: List[str] = list(options.get("extra_args") or [])
        self.continue_prompt: str = options.get("continue_prompt") or DEFAULT_CONTINUE_PROMPT
        self.interrupt_grace: float = float(options.get("interrupt_grace", 5.0))
        self.partial: bool = options.get("include_partial_messages", True)
        self._runs = CLIRuns()
        self.warm = WarmPool(options.get("agent_idle_timeout", DEFAULT_IDLE_TIMEOUT))

    def initial_state(self) -> Any:
        """A new session's data: ``{"session_id": null}`` (no CLI session yet)."""
        return {"session_id": None}

    def argv(self, session_id: Optional[str], approvals: bool = False) -> List[str]:
        """The command line of one run (``session_id``: the CLI session to resume;
        ``approvals``: the CLI must ask the bridge before it runs a tool that needs it)."""
        raise NotImplementedError

    def env(self, approvals: bool = False) -> Dict[str, str]:
        """Extra environment variables for the CLI."""
        return {}

    def error_hint(self, stderr_tail: str) -> str:
        """Text added to the error of a CLI that exited early (given its stderr's tail)."""
        return ""

    def result_hint(self, detail: str) -> str:
        """Text added to the error of a ``result`` that says ``detail`` (its message)."""
        return ""

    def refusing_setting(self) -> str:
        """The setting under which the CLI refuses, unasked, a tool that needs approval (for
        the ``<agent>-permission-refused`` hint)."""
        return "its default permission mode"

    def run_turn(self, ctx: TurnContext) -> TurnResult:
        """Run the CLI once for the turn (or resume it after a restart).

        Returns:
            ``stop`` with the result's usage; ``error`` when the CLI reports one, cannot be
            started, or exits before its ``result`` message; ``cancelled`` after a cancel.
        """
        session_id, prompt, tools = resume_turn(ctx, "session_id", self.continue_prompt, self.agent_id)
        message = {
            "type": "user",
            "message": {"role": "user", "content": prompt},
            "parent_tool_use_id": None,
            "session_id": session_id or "default",
        }
        approvals = ctx.approvals
        key = self._warm_key(ctx, approvals)
        stdin = json.dumps(message) + "\n"
        warm = self.warm.take(ctx.session_id, key, session_id)
        if warm is not None:  # a warm process: the prompt is its next turn
            if warm.relay is not None:
                warm.relay.bind(ctx)  # its host tools' server serves this turn
            process_group_started(warm.proc.proc.pid)  # this turn's group: killed if it is abandoned
            warm.proc.write(stdin)
            early, mapper, seen = self._pump(ctx, warm, tools)
            if early is None or seen:
                return self._result(ctx, early, mapper, tools)
            # It was gone before it printed a line: nothing ran. Start the CLI cold.
            log.info("session %s: its warm %s had exited; starting it again", ctx.session_id, self.label)
        relay = AgentRelay(ctx) if host_tools(ctx) else None  # lives as long as the process
        try:
            if approvals and self.initialize_for_approvals:
                stdin = initialize_request() + stdin
            with mcp_config.kept_relay(relay, ctx):
                argv, env = self.argv(session_id, approvals), self.env(approvals)
            proc = JsonLinesProcess(argv, workspace_dir(), stdin, keep_stdin=True, env=env)
        except BaseException as exc:
            if relay is not None:
                relay.close()
            if isinstance(exc, CLIStartError):
                return TurnResult("error", error=f"{exc} ({self.install_hint})")
            raise
        early, mapper, _seen = self._pump(ctx, Warm(proc, relay, key, session_id), tools)
        return self._result(ctx, early, mapper, tools)

    def _pump(
        self, ctx: TurnContext, run: Warm, tools: CLITools
    ) -> Tuple[Optional[EarlyExit], StreamMapper, bool]:
        """Run the turn on ``run.proc`` to its result; keep the process warm after a clean one,
        else stop it (and its relay). Returns the early exit (or ``None``), the mapper, and
        whether the CLI printed anything."""
        proc = run.proc
        mapper = StreamMapper(self, ctx, tools)
        control = StreamControl(
            ctx,
            proc,
            session_id=run.cli_session,
            permission_updates=self.permission_updates,
            messages=self.supports_messages,
            open_step=mapper.ensure_step,
            name=self.agent_id,
        )
        seen: List[bool] = []

        def on_event(event: Event) -> bool:
            # Control messages first (permission asks, message lifecycles); a result ends
            # the run unless a message written to the CLI is still to be answered.
            if not seen:
                seen.append(True)
            if event.obj is not None and control.handle(event.obj):
                return False
            return mapper.on_event(event) and control.finished_at_result()

        interrupt = {
            "type": "control_request",
            "request_id": "bridge-cancel",
            "request": {"subtype": "interrupt"},
        }
        try:
            early = self._runs.run(
                proc,
                ctx.cancelled,
                on_event,
                self.interrupt_grace,
                interrupt=lambda: proc.write(json.dumps(interrupt) + "\n"),
                idle=control.idle if self.supports_messages else None,
                keep=True,
            )
        except BaseException:
            run.stop()
            raise
        last = mapper.results[-1] if mapper.results else {}
        succeeded = bool(last) and not last.get("is_error") and last.get("subtype", "success") == "success"
        self.warm.keep_or_stop(ctx, run, early is None and succeeded)
        return early, mapper, bool(seen)

    def _result(
        self, ctx: TurnContext, early: Optional[EarlyExit], mapper: StreamMapper, tools: CLITools
    ) -> TurnResult:
        """The turn's result from its run's end."""
        if early is not None:
            mapper.close_step()
            tail = early.stderr_tail
            error = early.error(self.label, "its result message", tail) + self.error_hint(tail)
            return TurnResult("error", error=error)
        mapper.close_step()
        tools.finished()
        if ctx.cancelled.is_set():
            return TurnResult("cancelled")
        result = mapper.results[-1] if mapper.results else {}
        usage = _usage(mapper.results)
        if result.get("is_error") or result.get("subtype", "success") != "success":
            detail = summarize(result.get("result") or result.get("errors") or result.get("subtype"))
            return TurnResult("error", usage or None, f"{self.label}: {detail}{self.result_hint(detail)}")
        return TurnResult("stop", usage or None)

    def _warm_key(self, ctx: TurnContext, approvals: bool) -> Hashable:
        """What a warm process of this turn must have been started with: its command line and
        variables (without a resumed session and without the host tools' relay, which a warm
        process keeps), and the session's environment and host tools."""
        with mcp_config.kept_relay(None, ctx):
            argv, env = tuple(self.argv(None, approvals)), self.env(approvals)
        variables = tuple(sorted({**ctx.env, **env}.items()))
        return (argv, variables, json.dumps(host_tools(ctx), sort_keys=True))

    def session_closed(self, session_id: str) -> None:
        """Stop the session's warm process, if it has one."""
        self.warm.drop(session_id)

    def close(self) -> None:
        """Kill every running CLI's process group (the bridge is shutting down)."""
        self.warm.close()
        self._runs.stop_all()


class ClaudeCodeDriver(StreamJsonDriver):
    """The Claude Code agent (``agent_id`` ``"claude-code"``); see the module docstring.

    Args:
        options: the checked options (see :func:`make_driver`).
    """

    supports_messages = True
    permission_updates = True
    supports_host_tools = True  # through the MCP server named host (drivers.mcp_config)

    def __init__(self, options: Dict[str, Any]) -> None:
        super().__init__(options)
        self.contained = sandbox_isolated()
        default_mode = "bypassPermissions" if self.contained else None
        self.permission_mode: Optional[str] = options.get("permission_mode", default_mode)
        self.max_turns: Optional[int] = options.get("max_turns")
        self.allowed_tools: List[str] = list(options.get("allowed_tools") or [])

    export_files, import_files = transcripts.claude_export_files, transcripts.claude_import_files

    def _mode(self, approvals: bool) -> Optional[str]:
        # With approvals the CLI must ask: a mode that skips its checks is not passed.
        if approvals and self.permission_mode == "bypassPermissions":
            return None
        return self.permission_mode

    def argv(self, session_id: Optional[str], approvals: bool = False) -> List[str]:
        """The command line of one run (``session_id``: the CLI session to resume;
        ``approvals``: ``--permission-prompt-tool stdio``, and no ``bypassPermissions``)."""
        argv = [
            self.executable,
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--input-format",
            "stream-json",
        ]
        if session_id:
            argv += ["--resume", session_id]
        if self.model:
            argv += ["--model", self.model]
        mode = self._mode(approvals)
        if mode:
            argv += ["--permission-mode", mode]
        if approvals:
            argv += ["--permission-prompt-tool", "stdio"]
        if self.max_turns is not None:
            argv += ["--max-turns", str(self.max_turns)]
        if self.append_system_prompt:
            argv += ["--append-system-prompt", self.append_system_prompt]
        allowed = self.allowed_tools + mcp_config.claude_allowed()  # the host tools too
        if allowed:
            argv += ["--allowedTools", ",".join(allowed)]
        if self.partial:
            argv.append("--include-partial-messages")
        return argv + mcp_config.claude_args() + self.extra_args

    def env(self, approvals: bool = False) -> Dict[str, str]:
        """In an isolated sandbox with the default bypass, ``IS_SANDBOX=1`` (claude refuses
        to skip its checks as root without it)."""
        bypass = self._mode(approvals) == "bypassPermissions"
        if self.contained and bypass and "IS_SANDBOX" not in os.environ:
            return {"IS_SANDBOX": "1"}
        return {}

    def refusing_setting(self) -> str:
        """``permission_mode X``, or the default's reason (no bypass on a sandbox that is not
        isolated)."""
        if self.permission_mode:
            return f"permission_mode {self.permission_mode}"
        return "no permission_mode: the default on a sandbox that is not isolated"

    def error_hint(self, stderr_tail: str) -> str:
        """The root hint when claude refused ``bypassPermissions`` as root."""
        return _ROOT_HINT if "root/sudo" in stderr_tail else ""

    def result_hint(self, detail: str) -> str:
        """Where the key comes from, when claude found none or a bad one."""
        return _KEY_HINT if ("Not logged in" in detail or "API key" in detail) else ""


def _usage(results: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The turn's usage from its ``result`` messages (more than one when a user message
    started another CLI turn): the last one's figures; with several, token counts, turns and
    durations summed (``total_cost_usd`` is already the run's total)."""
    keys = ("usage", "total_cost_usd", "num_turns", "duration_ms")
    if not results:
        return {}
    out = {k: results[-1].get(k) for k in keys if k in results[-1]}
    if len(results) > 1:
        for key in ("num_turns", "duration_ms"):
            values: List[float] = [r[key] for r in results if isinstance(r.get(key), (int, float))]
            if values:
                out[key] = sum(values)
        tokens: Dict[str, Any] = {}
        for r in results:
            usage = r.get("usage")
            for k, v in (usage.items() if isinstance(usage, dict) else ()):
                if isinstance(v, int) and not isinstance(v, bool):
                    tokens[k] = tokens.get(k, 0) + v
        if tokens:
            out["usage"] = tokens
    return out


def make_driver(options: Any) -> ClaudeCodeDriver:
    """Make the claude-code driver from its options (see the module docstring).

    Raises:
        ValueError: an option is unknown or of the wrong type.
    """
    opts = check_agent_options("claude-code", options)  # the same check bridge_options() makes
    return ClaudeCodeDriver(opts)

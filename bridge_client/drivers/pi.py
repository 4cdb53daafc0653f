"""The ``pi`` driver: runs pi, the coding agent of ``@mariozechner/pi-coding-agent``, in its
RPC mode inside the sandbox and maps its events onto parts.

A session's first turn starts, in the workspace::

    pi --mode rpc [--session SESSION_ID] [--provider P] [--model M] [--thinking L]
       [--tools T,...] [--append-system-prompt S] [EXTRA_ARGS...]

and writes two RPC commands to its stdin: ``get_state`` (its answer names the pi session:
RPC mode prints no session header) and ``prompt`` with the turn's prompt. The turn ends at
``agent_end``. The process is then kept warm (:mod:`bridge_client.drivers.warm_cli`): the
session's next turn is one more ``prompt`` command to it. A turn after a cancelled or failed
one, after a restart, or with another environment starts a new process with ``--session``.

The model endpoint comes from pi's own configuration (``~/.pi/agent/models.json`` for a
custom provider, or a built-in provider's key in the environment).

Where the format comes from: pi's RPC mode documentation (its package's RPC page: the
commands and their ``response`` lines), its JSON mode documentation (``AgentSessionEvent``:
``turn_start``/``turn_end``, ``message_start``/``message_update``/``message_end``,
``tool_execution_start``/``_end``, ``agent_end``) and ``pi-ai``'s ``AssistantMessageEvent``
(``text_delta``, ``thinking_delta``, ...).

What each event becomes:

- the ``get_state`` answer: its ``sessionId`` goes into the session state
  (``{"session_id": ...}``); a ``prompt`` refused (``success`` false) ends the turn with
  ``error`` and pi's message.
- ``turn_start`` (one model call and the tools it asked for): ``step-start``; ``turn_end``:
  ``step-finish`` (``tool-calls`` when it had tool results), its message's ``usage``.
- ``message_update`` ``text_delta`` → ``text-delta``; ``thinking_delta`` →
  ``reasoning-delta``, as they stream.
- ``tool_execution_start`` → ``tool-call`` (``toolCallId``, ``toolName``, ``args``);
  ``tool_execution_end`` → ``tool-result`` (the text of ``result.content``, ``isError``).
- ``auto_retry_start`` → ``data`` ``pi-retry``.
- an assistant ``message_end`` with ``stopReason`` ``error``: its ``errorMessage`` is kept;
  ``agent_end`` then ends the turn with ``error`` and that message (else ``stop``).
- A line that is not JSON: ``data`` ``pi-unparsed``; the turn goes on.

pi has no permission checks of its own (by design: "run in a container"), so there is no
default to keep on a ``LocalSandbox``: restrict its tools with ``tools`` (for example
``["read"]``) where its commands must not run.

Cancel: SIGINT to the CLI's process group; killed ``interrupt_grace`` seconds later.

What survives a restart: the session state holds pi's session id, resumed with
``--session``; a turn continued after a restart with completed steps resumes it with
``continue_prompt``, one with none runs its prompt again.

Options (``agent_options``, a JSON object or null):
    executable: the CLI program; given, it is run as is and never installed. Default: ``pi``
        on ``PATH``, else the copy the template installed in the sandbox's private prefix
        (:doc:`drivers/pi`).
    provider: ``--provider``; model: ``--model``; thinking: ``--thinking`` (default: pi's).
    tools: a list of tool names for ``--tools`` (default: pi's, which include ``bash``).
    append_system_prompt: ``--append-system-prompt``.
    extra_args: a list of further arguments.
    continue_prompt: the prompt that continues a turn cut by a restart.
    interrupt_grace: seconds >= 0 between SIGINT and killing the CLI (default 5).
    agent_idle_timeout: seconds > 0 a warm pi process may stay unused before it is stopped
        (default 600), or null: kept until the session closes or the bridge exits.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Set, Tuple

from ..bridge.driver import TurnContext, TurnResult, process_group_started
from ..driver_options import check_agent_options
from .claude_code import DEFAULT_CONTINUE_PROMPT
from . import transcripts
from .cli_install import find_cli
from .cli_process import CLIRuns, CLIStartError, EarlyExit, Event, JsonLinesProcess, join_text
from .cli_process import keep_session_id, summarize
from .cli_tools_once import CLITools, resume_turn
from .idle_reaper import DEFAULT_IDLE_TIMEOUT
from .warm_cli import Warm, WarmPool
from .workspace import workspace_dir

__all__ = ["PiDriver", "make_driver"]


class _Mapper:
    """Maps one run's events onto ``ctx``."""

    def __init__(self, ctx: TurnContext, tools: CLITools) -> None:
        self.ctx = ctx
        self.tools = tools  # journals each call and result first (.cli_tools_once)
        self.called: Set[str] = set()
        self.step_tools = False
        self.error: Optional[str] = None
        self.usage: List[Any] = []

    def _open(self) -> None:
        if self.ctx.step is None:
            self.ctx.start_step()
            self.step_tools = False

    def close_step(self, usage: Any = None) -> None:
        if self.ctx.step is not None:
            self.ctx.finish_step("tool-calls" if self.step_tools else "stop", usage)

    def on_event(self, event: Event) -> bool:
        """Map one line; return True for ``agent_end`` (the run's last event)."""
        ctx, ev = self.ctx, event.obj
        if ev is None:
            ctx.data("pi-unparsed", {"line": event.line[:2000]})
            return False
        kind = ev.get("type")
        if kind == "response":  # an RPC command's answer
            if ev.get("command") == "get_state" and ev.get("success"):
                keep_session_id(ctx, "session_id", _obj(ev.get("data")).get("sessionId"))
            elif ev.get("command") == "prompt" and not ev.get("success"):
                self.error = str(ev.get("error") or "pi refused the prompt")
                self.close_step()
                return True  # no agent_end follows a refused prompt
        elif kind == "session":
            keep_session_id(ctx, "session_id", ev.get("id"))
        elif kind == "turn_start":
            self.close_step()
            self._open()
        elif kind == "turn_end":
            message = _obj(ev.get("message"))
            usage = message.get("usage")
            if usage is not None:
                self.usage.append(usage)
            self.close_step(usage)
        elif kind == "message_update":
            raw = ev.get("assistantMessageEvent")
            update: Dict[str, Any] = raw if isinstance(raw, dict) else {}
            delta = update.get("delta")
            if isinstance(delta, str) and delta and update.get("type") in ("text_delta", "thinking_delta"):
                self._open()
                if update["type"] == "text_delta":
                    ctx.text(delta)
                else:
                    ctx.reasoning(delta)
        elif kind == "message_end":
            message = _obj(ev.get("message"))
            if message.get("role") == "assistant" and message.get("stopReason") in ("error", "aborted"):
                self.error = str(message.get("errorMessage") or message.get("stopReason"))
        elif kind == "tool_execution_start":
            self._open()
            call_id = str(ev.get("toolCallId", ""))
            if call_id not in self.called:
                self.called.add(call_id)
                self.step_tools = True
                self.tools.call(call_id, str(ev.get("toolName", "unknown")), ev.get("args"))
        elif kind == "tool_execution_end":
            self._open()
            result = ev.get("result")
            content = result.get("content") if isinstance(result, dict) else result
            self.tools.result(
                str(ev.get("toolCallId", "")), str(ev.get("toolName", "unknown")), join_text(content),
                bool(ev.get("isError")),
            )
        elif kind == "auto_retry_start":
            self._open()
            keys = ("attempt", "maxAttempts", "delayMs", "errorMessage")
            ctx.data("pi-retry", {k: ev.get(k) for k in keys})
        elif kind == "agent_end":
            self.close_step()
            return True
        return False


def _obj(value: Any) -> Dict[str, Any]:
    return value if isinstance(value, dict) else {}


class PiDriver:
    """The pi agent (``agent_id`` ``"pi"``); see the module docstring.

    Args:
        options: the checked options (see :func:`make_driver`).
    """

    export_files, import_files = transcripts.pi_export_files, transcripts.pi_import_files

    agent_id = "pi"
    supports_approvals = False  # pi has no permission checks of its own
    supports_messages = False
    program = "pi"
    package = "@mariozechner/pi-coding-agent"
    version = "0.73.1"

    def __init__(self, options: Dict[str, Any]) -> None:
        self.executable: str = find_cli(self.program, self.package, self.version, options.get("executable"))
        self.provider: Optional[str] = options.get("provider")
        self.model: Optional[str] = options.get("model")
        self.thinking: Optional[str] = options.get("thinking")
        self.tools: Optional[List[str]] = options.get("tools")
        self.append_system_prompt: Optional[str] = options.get("append_system_prompt")
        self.extra_args: List[str] = list(options.get("extra_args") or [])
        self.continue_prompt: str = options.get("continue_prompt") or DEFAULT_CONTINUE_PROMPT
        self.interrupt_grace: float = float(options.get("interrupt_grace", 5.0))
        self._runs = CLIRuns()
        self.warm = WarmPool(options.get("agent_idle_timeout", DEFAULT_IDLE_TIMEOUT))

    def initial_state(self) -> Any:
        """A new session's data: ``{"session_id": null}`` (no pi session yet)."""
        return {"session_id": None}

    def argv(self, session_id: Optional[str]) -> List[str]:
        """The command line of a session's pi process (``session_id``: the pi session to
        continue)."""
        argv = [self.executable, "--mode", "rpc"]
        if session_id:
            argv += ["--session", session_id]
        named = (("--provider", self.provider), ("--model", self.model), ("--thinking", self.thinking))
        for flag, value in named:
            if value:
                argv += [flag, value]
        if self.tools is not None:
            argv += ["--tools", ",".join(self.tools)]
        if self.append_system_prompt:
            argv += ["--append-system-prompt", self.append_system_prompt]
        return argv + self.extra_args

    def run_turn(self, ctx: TurnContext) -> TurnResult:
        """Run the turn on the session's warm pi process, or start one (and continue its
        session after a restart).

        Returns:
            ``stop`` with the model calls' usage; ``error`` when the model call failed, the
            CLI cannot be started, or it exits before ``agent_end``; ``cancelled``.
        """
        session_id, prompt, tools = resume_turn(ctx, "session_id", self.continue_prompt, self.agent_id)
        key = (tuple(self.argv(None)), tuple(sorted(ctx.env.items())))
        command = json.dumps({"type": "prompt", "message": prompt}) + "\n"
        warm = self.warm.take(ctx.session_id, key, session_id)
        if warm is not None:  # the prompt is the warm process's next one
            process_group_started(warm.proc.proc.pid)  # this turn's group: killed if it is abandoned
            warm.proc.write(command)
            early, mapper, seen = self._pump(ctx, warm, tools)
            if early is None or seen:
                return self._result(ctx, early, mapper, tools)
            # It was gone before it printed a line: nothing ran. Start pi cold.
        try:
            # get_state first: its answer names the pi session (RPC mode prints no header).
            stdin = json.dumps({"type": "get_state"}) + "\n" + command
            proc = JsonLinesProcess(self.argv(session_id), workspace_dir(), stdin, keep_stdin=True)
        except CLIStartError as exc:
            return TurnResult("error", error=f"{exc} (is pi installed? the pi template installs it)")
        early, mapper, _seen = self._pump(ctx, Warm(proc, None, key, session_id), tools)
        return self._result(ctx, early, mapper, tools)

    def _pump(
        self, ctx: TurnContext, run: Warm, tools: CLITools
    ) -> Tuple[Optional[EarlyExit], _Mapper, bool]:
        """Run the turn on ``run.proc`` to its ``agent_end``; keep the process warm after a
        clean one, else stop it. Returns the early exit (or ``None``), the mapper, and whether
        pi printed anything."""
        mapper = _Mapper(ctx, tools)
        seen: List[bool] = []

        def on_event(event: Event) -> bool:
            if not seen:
                seen.append(True)
            return mapper.on_event(event)

        try:
            early = self._runs.run(run.proc, ctx.cancelled, on_event, self.interrupt_grace, keep=True)
        except BaseException:
            run.stop()
            raise
        self.warm.keep_or_stop(ctx, run, early is None and mapper.error is None)
        return early, mapper, bool(seen)

    def _result(
        self, ctx: TurnContext, early: Optional[EarlyExit], mapper: _Mapper, tools: CLITools
    ) -> TurnResult:
        if early is not None:
            mapper.close_step()
            tail = early.stderr_tail or mapper.error or ""
            return TurnResult("error", error=early.error("pi", "the end of its run", tail))
        mapper.close_step()
        tools.finished()
        if ctx.cancelled.is_set():
            return TurnResult("cancelled")
        usage = {"calls": mapper.usage} if mapper.usage else None
        if mapper.error is not None:
            return TurnResult("error", usage, f"pi: {summarize(mapper.error)}")
        return TurnResult("stop", usage)

    def session_closed(self, session_id: str) -> None:
        """Stop the session's warm pi process, if it has one."""
        self.warm.drop(session_id)

    def close(self) -> None:
        """Stop the warm processes and kill every running CLI's process group (the bridge is
        shutting down)."""
        self.warm.close()
        self._runs.stop_all()


def make_driver(options: Any) -> PiDriver:
    """Make the pi driver from its options (see the module docstring).

    Raises:
        ValueError: an option is unknown or of the wrong type.
    """
    return PiDriver(check_agent_options("pi", options))

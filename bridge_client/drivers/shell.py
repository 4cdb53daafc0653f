"""The ``shell`` driver: runs each non-blank line of the prompt as a shell command in the
workspace (the bridge's working directory), one step per command, streaming its output as
text deltas while it runs.

Each step: ``step-start``; ``tool-call`` (``shell``, ``{"command": line}``); the output
(stdout and stderr together) as ``text-delta`` parts as it arrives; ``tool-result``
(``{"exitCode": code, "timedOut": bool}``, an error when the code is not 0); ``step-finish``.
At the end the session state becomes ``{"commands": total run in the session}``. A failing
command ends the turn with ``error`` unless ``keep_going``.

With approvals on (``CreateSessionOptions(approvals=True)``), each step asks before its
command runs: an ``approval-request`` for the tool ``shell``, input ``{"command": line}``,
title ``shell: <line>``, after the ``tool-call``. A denied command does not run: its
``tool-result`` is ``{"denied": true, "message": ...}`` (an error), the step finishes with
``denied``, and the turn goes on with the next command. An ``allow-always`` answer allows every
later command of the session.

User messages (``Turn.say``) are further commands: at the start of each step the driver takes
the next message, if one came, and runs its text as that step's command (before the prompt's
remaining lines); after the prompt's last line it runs the messages that came meanwhile. The
step's ``tool-call`` input then carries the message's id (``{"command": text, "messageId":
id}``), which is how a turn continued after a restart tells the prompt's lines from messages.

Commands get no stdin, run in a new session (process group) so that a timeout or a cancel
kills the whole group, see the session's environment over the bridge's own (the variables
the host gave the session), and never see a ``BRIDGE_CLIENT_*`` variable.

A command runs at most once, also across bridge deaths: each runs under a keeper of its own
(:class:`~bridge_client.drivers.keeper.KeptCommand`), which is its parent and outlives a
SIGKILLed bridge, so the command goes on to its end, and its output and exit status are
recorded in the bridge's state directory. The step run again in the next bridge finds
that record (by the session, turn, step and command) and takes the command's result instead of
running it again: without a new approval request (the command runs on the first one), it
streams the recorded output again from its start and waits for the end of a command still
running. A command whose keeper is gone too (the whole sandbox stopped) gives the result
``{"interrupted": true, "message": ...}`` (an error): it may have run in part or to the end,
and is not run again.

Options (``agent_options``, a JSON object or null):
    timeout: seconds per command, > 0 (default 600).
    shell: the shell that runs ``-c LINE`` (default ``/bin/sh``).
    keep_going: bool, run the next commands after a failing one (default false).
"""
from __future__ import annotations

import codecs
import threading
from typing import Any, Dict, List, NamedTuple, Optional, Set

from ..bridge.driver import TurnContext, TurnResult
from ..driver_options import check_agent_options
from ..wire.parts import ToolCall, ToolResult
from .keeper import KeptCommand, interrupted_message
from .workspace import workspace_dir

__all__ = ["ShellDriver", "make_driver", "CommandResult"]

_KILL_GRACE = 2.0
"""Seconds between SIGTERM and SIGKILL to a command's process group."""


class _CannotRun(Exception):
    """The command could not be started (a NUL in it, the shell missing): said as its result."""


class CommandResult(NamedTuple):
    """How one command ended: ``exit_code`` (negative: killed by that signal; ``None``: it was
    interrupted, see the module), and whether it timed out or was cancelled."""

    exit_code: Optional[int]
    timed_out: bool
    cancelled: bool


def _from_message(tool_input: Any) -> bool:
    return isinstance(tool_input, dict) and "messageId" in tool_input


def _denied(output: Any) -> bool:
    return isinstance(output, dict) and output.get("denied") is True


class ShellDriver:
    """The shell agent (``agent_id`` ``"shell"``).

    Args:
        timeout: seconds per command. shell: the shell program. keep_going: go on after a
            failing command.
    """

    agent_id = "shell"
    supports_approvals = True
    supports_messages = True

    def __init__(self, timeout: float = 600.0, shell: str = "/bin/sh", keep_going: bool = False) -> None:
        self.timeout = timeout
        self.shell = shell
        self.keep_going = keep_going
        self._lock = threading.Lock()
        self._running: Set[KeptCommand] = set()

    def initial_state(self) -> Any:
        """A new session's data: ``{"commands": 0}``."""
        return {"commands": 0}

    def run_turn(self, ctx: TurnContext) -> Optional[TurnResult]:
        """Run the prompt's commands from ``ctx.completed_steps`` on, one per step, and the
        user messages that come meanwhile (see the module docstring)."""
        commands = [line for line in ctx.prompt.splitlines() if line.strip()]
        data = ctx.state.data
        previous = data.get("commands", 0) if isinstance(data, dict) else 0
        previous = previous if isinstance(previous, int) else 0
        ran = 0  # commands this session ran in this turn (completed steps' before a restart too)
        done = 0  # the prompt's lines whose step completed
        for parts in ctx.steps:
            call = next((p for p in parts if isinstance(p, ToolCall)), None)
            done += 0 if isinstance(call, ToolCall) and _from_message(call.input) else 1
            ran += 0 if any(isinstance(p, ToolResult) and _denied(p.output) for p in parts) else 1
        failure: Optional[str] = None
        while not ctx.cancelled.is_set():
            # One at a time: a message is taken by the step that runs it (handed again if that
            # step's attempt is abandoned).
            message = ctx.wait_message(0.0)
            source: Dict[str, str] = {}
            if message is not None:
                line, source = message.text, {"messageId": message.message_id}
            elif done < len(commands):
                line = commands[done]
            else:
                break
            step = ctx.start_step()
            call_id = f"shell-{step}"
            ctx.tool_call(call_id, "shell", {"command": line, **source})
            record = KeptCommand.folder_for(ctx.session_id, ctx.turn_id, call_id, line)
            kept = KeptCommand.adopt(record)  # the run an earlier bridge started for this step
            if kept is None and ctx.approvals:
                decision = ctx.ask_approval(call_id, "shell", {"command": line}, title=f"shell: {line}")
                if not decision.allowed:
                    denial = {"denied": True, "message": decision.message, "by": decision.by}
                    ctx.tool_result(call_id, "shell", denial, is_error=True)
                    ctx.finish_step("cancelled" if decision.by == "cancel" else "denied")
                    done += 0 if source else 1
                    continue
            try:
                result = self.run_command(ctx, line, record, kept)
            except _CannotRun as exc:
                ctx.tool_result(call_id, "shell", {"error": str(exc)}, is_error=True)
                ctx.finish_step("error")
                done += 0 if source else 1
                if self.keep_going:
                    continue
                failure = str(exc)
                break
            if result.exit_code is None:  # interrupted: it may have run, it is not run again
                output: Dict[str, Any] = {"interrupted": True, "message": interrupted_message()}
                ctx.tool_result(call_id, "shell", output, is_error=True)
                ctx.finish_step("error")
                ran += 1
                done += 0 if source else 1
                if self.keep_going:
                    continue
                failure = f"command interrupted: {line}"
                break
            ran += 1
            output = {"exitCode": result.exit_code, "timedOut": result.timed_out}
            ctx.tool_result(call_id, "shell", output, is_error=result.exit_code != 0)
            if result.cancelled and (ctx.cancelled.is_set() or not kept):
                ctx.finish_step("cancelled")
                break
            # (an adopted command that a stopping bridge cancelled: a failed command, below)
            ctx.finish_step("stop" if result.exit_code == 0 else "error")
            done += 0 if source else 1
            if result.exit_code != 0 and not self.keep_going:
                if result.timed_out:
                    failure = f"command timed out after {self.timeout:g} s: {line}"
                elif result.cancelled:
                    failure = f"command was killed when the bridge stopped: {line}"
                else:
                    failure = f"command exited with status {result.exit_code}: {line}"
                break
        ctx.set_state({"commands": previous + ran})
        return TurnResult("error", error=failure) if failure else None

    def run_command(
        self,
        ctx: TurnContext,
        line: str,
        record: Optional[str] = None,
        kept: Optional[KeptCommand] = None,
    ) -> CommandResult:
        """Run one command under its keeper, streaming its output to ``ctx.text`` as it
        arrives (see the module's docstring).

        Args:
            ctx: the turn (a step must be open).
            line: the command, run as ``[shell, "-c", line]`` in the workspace.
            record: its record folder
                (:meth:`~bridge_client.drivers.keeper.KeptCommand.folder_for`; ``None``: a
                temporary one, nothing survives the bridge).
            kept: the run an earlier bridge started
                (:meth:`~bridge_client.drivers.keeper.KeptCommand.adopt`): its output is
                streamed from its start and its result taken; nothing is started.

        Returns:
            How it ended (``exit_code`` ``None``: interrupted). On timeout or cancel its
            process group is killed. A command that cannot be started (a NUL character in it,
            no such shell) raises an error of this module's own, which :meth:`run_turn` gives
            as the tool's result.
        """
        if kept is None:
            if "\0" in line:  # no argv can carry it (Popen's ValueError: embedded null byte)
                raise _CannotRun(
                    f"the command holds a NUL character, which no command line can carry: {line!r}"
                )
            env = ctx.child_env()  # the bridge's environment, the session's over it
            try:
                argv = [self.shell, "-c", line]
                kept = KeptCommand.start(record, argv, workspace_dir(), env, self.timeout, _KILL_GRACE)
            except (OSError, RuntimeError) as exc:
                raise _CannotRun(f"cannot run the command under its keeper: {exc}") from None
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

        def out(data: bytes) -> None:
            text = decoder.decode(data)
            if text:
                ctx.text(text)

        with self._lock:
            self._running.add(kept)
        try:
            status = kept.wait(ctx.cancelled, out)
        finally:
            with self._lock:
                self._running.discard(kept)
            kept.discard()
        tail = decoder.decode(b"", final=True)
        if tail:
            ctx.text(tail)
        if "error" in status:
            raise _CannotRun(f"cannot run the shell {self.shell}: {status['error']}")
        if "exitCode" not in status:
            return CommandResult(None, False, False)
        timed_out, cancelled = bool(status.get("timedOut")), bool(status.get("cancelled"))
        return CommandResult(int(status["exitCode"]), timed_out, cancelled)

    def turn_finished(self, session_id: str, turn_id: str) -> None:
        """The turn's ``turn-finish`` is committed: its commands' records go."""
        KeptCommand.forget_turn(session_id, turn_id)

    def close(self) -> None:
        """Kill every running command's process group (the bridge is shutting down): each is
        recorded as cancelled."""
        with self._lock:
            running: List[KeptCommand] = list(self._running)
        for kept in running:
            kept.cancel()


def make_driver(options: Any) -> ShellDriver:
    """Make the shell driver from its options (see the module's docstring).

    Raises:
        ValueError: an option is unknown or of the wrong type.
    """
    options = check_agent_options("shell", options)  # the same check bridge_options() makes
    return ShellDriver(
        timeout=float(options.get("timeout", 600)),
        shell=options.get("shell", "/bin/sh"),
        keep_going=options.get("keep_going", False),
    )

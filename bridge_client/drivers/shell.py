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

A bridge that is SIGKILLed cannot kill its commands, and a command in its own session
outlives it; the turn's step then runs again in the next bridge while the abandoned
attempt's command may still be writing files. So the driver starts a *keeper* process with its
first command (:mod:`bridge_client.drivers.keeper`), which SIGKILLs the process groups of the
commands still running once the bridge is gone, however it died.

Options (``agent_options``, a JSON object or null):
    timeout: seconds per command, > 0 (default 600).
    shell: the shell that runs ``-c LINE`` (default ``/bin/sh``).
    keep_going: bool, run the next commands after a failing one (default false).
"""
from __future__ import annotations

import codecs
import os
import select
import signal
import subprocess
import threading
import time
from typing import Any, Dict, List, NamedTuple, Optional, Set

from ..bridge.driver import TurnContext, TurnResult, process_group_ended, process_group_started
from ..driver_options import check_agent_options
from ..wire.parts import ToolCall, ToolResult
from .keeper import ProcessKeeper
from .workspace import workspace_dir

__all__ = ["ShellDriver", "make_driver", "CommandResult"]

_TICK = 0.05
"""Seconds between checks of cancel and timeout while a command is silent."""

_KILL_GRACE = 2.0
"""Seconds between SIGTERM and SIGKILL to a command's process group."""

_DRAIN = 0.2
"""Seconds to keep reading after the command exited (a background child may hold the pipe)."""


class _CannotRun(Exception):
    """The command could not be started (a NUL in it, the shell missing): said as its result."""


class CommandResult(NamedTuple):
    """How one command ended: ``exit_code`` (negative: killed by that signal), and whether it
    timed out or was cancelled."""

    exit_code: int
    timed_out: bool
    cancelled: bool


# Wait for the bridge's go-ahead on stdin, then run the command ($1) with no stdin.
# The positional parameters and variables are left as `sh -c LINE` would have them.
_GATE = 'read -r _ || exit 125; exec </dev/null; _bc_line=$1; shift; eval "unset -v _bc_line; $_bc_line"'


def _from_message(tool_input: Any) -> bool:
    return isinstance(tool_input, dict) and "messageId" in tool_input


def _denied(output: Any) -> bool:
    return isinstance(output, dict) and output.get("denied") is True


def _kill_group(proc: "subprocess.Popen[bytes]") -> None:
    """SIGTERM the command's process group, then SIGKILL it after a short grace."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    try:
        proc.wait(_KILL_GRACE)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()


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
        self._procs: Set["subprocess.Popen[bytes]"] = set()
        self._keeper = ProcessKeeper("shell commands")

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
            if ctx.approvals:
                decision = ctx.ask_approval(call_id, "shell", {"command": line}, title=f"shell: {line}")
                if not decision.allowed:
                    denial = {"denied": True, "message": decision.message, "by": decision.by}
                    ctx.tool_result(call_id, "shell", denial, is_error=True)
                    ctx.finish_step("cancelled" if decision.by == "cancel" else "denied")
                    done += 0 if source else 1
                    continue
            try:
                result = self.run_command(ctx, line)
            except _CannotRun as exc:
                ctx.tool_result(call_id, "shell", {"error": str(exc)}, is_error=True)
                ctx.finish_step("error")
                done += 0 if source else 1
                if self.keep_going:
                    continue
                failure = str(exc)
                break
            ran += 1
            output = {"exitCode": result.exit_code, "timedOut": result.timed_out}
            ctx.tool_result(call_id, "shell", output, is_error=result.exit_code != 0)
            if result.cancelled:
                ctx.finish_step("cancelled")
                break
            ctx.finish_step("stop" if result.exit_code == 0 else "error")
            done += 0 if source else 1
            if result.exit_code != 0 and not self.keep_going:
                if result.timed_out:
                    failure = f"command timed out after {self.timeout:g} s: {line}"
                else:
                    failure = f"command exited with status {result.exit_code}: {line}"
                break
        ctx.set_state({"commands": previous + ran})
        return TurnResult("error", error=failure) if failure else None

    def run_command(self, ctx: TurnContext, line: str) -> CommandResult:
        """Run one command, streaming its output to ``ctx.text`` as it arrives.

        Args:
            ctx: the turn (a step must be open).
            line: the command, run as ``[shell, "-c", line]`` in the current directory.

        Returns:
            How it ended. On timeout or cancel its process group is killed. A command that
            cannot be started (a NUL character in it, no such shell) raises an error of this
            module's own, which :meth:`run_turn` gives as the tool's result.
        """
        env = ctx.child_env()  # the bridge's environment, the session's over it
        # The command waits at a gate on its stdin until the keeper knows its group: a bridge
        # SIGKILLed in between leaves a command that reads end of file and exits unrun, never
        # one that nobody kills (its step runs again in the next bridge).
        if "\0" in line:  # no argv can carry it (Popen's ValueError: embedded null byte)
            raise _CannotRun(f"the command holds a NUL character, which no command line can carry: {line!r}")
        folder = workspace_dir()
        try:
            proc = subprocess.Popen(
                [self.shell, "-c", _GATE, self.shell, line],
                cwd=folder,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
            )
        except OSError as exc:
            raise _CannotRun(f"cannot run the shell {self.shell}: {exc.strerror or exc}") from None
        with self._lock:
            self._procs.add(proc)
        self._keeper.started(proc.pid)  # its process group: start_new_session made it the leader
        process_group_started(proc.pid)  # the bridge kills it if the turn ignores a cancel
        assert proc.stdin is not None
        try:
            proc.stdin.write(b"\n")  # open the gate
            proc.stdin.close()
        except OSError:
            pass  # the command is gone already: its status says how
        try:
            timed_out, cancelled = self._pump(ctx, proc)
            if timed_out or cancelled:
                _kill_group(proc)
            return CommandResult(proc.wait(), timed_out, cancelled)
        except BaseException:
            _kill_group(proc)  # the bridge is stopping, or ctx refused a part: leave nothing behind
            raise
        finally:
            assert proc.stdout is not None
            proc.stdout.close()
            with self._lock:
                self._procs.discard(proc)
            if proc.returncode is not None:  # reaped: the keeper must not kill a reused pid
                self._keeper.ended(proc.pid)
                process_group_ended(proc.pid)

    def _pump(self, ctx: TurnContext, proc: "subprocess.Popen[bytes]") -> "tuple[bool, bool]":
        """Copy output to text deltas until EOF; return ``(timed_out, cancelled)``."""
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        deadline = time.monotonic() + self.timeout
        exited_at: Optional[float] = None
        while True:
            if ctx.cancelled.is_set():
                return False, True
            now = time.monotonic()
            if now >= deadline:
                return True, False
            if poller.poll(min(_TICK, deadline - now) * 1000):
                data = os.read(fd, 65536)
                if not data:
                    break
                text = decoder.decode(data)
                if text:
                    ctx.text(text)
                continue
            if proc.poll() is not None:
                # Exited, but a background child may keep the pipe open: stop after a short drain.
                exited_at = exited_at if exited_at is not None else now
                if now - exited_at >= _DRAIN:
                    break
        tail = decoder.decode(b"", final=True)
        if tail:
            ctx.text(tail)
        return False, False

    def close(self) -> None:
        """Kill every running command's process group (the bridge is shutting down)."""
        with self._lock:
            procs: List["subprocess.Popen[bytes]"] = list(self._procs)
        for proc in procs:
            _kill_group(proc)
        self._keeper.close()


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

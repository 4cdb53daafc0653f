"""Reading a turn to its end for ``run`` and ``continue``: each part printed (or its JSON with
``--json``) as it arrives, a spinner while the turn sends nothing, requests answered as
``--approve`` says, and Ctrl-C or SIGTERM suspending the turn (it goes on in the bridge) with
the command that continues it.
"""
from __future__ import annotations

import argparse
import shlex
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any, Dict, Optional

from ..terminal import Progress, is_terminal
from ..wire.parts import ApprovalRequest, Part, ToolCall
from .approver import Approver, begin
from .exits import OutputError, Stopped
from .output import Printer, print_err
from .sandboxes import sandbox_label
from .turn_state import save_turn_state

if TYPE_CHECKING:
    from ..client.session import Session

__all__ = ["continue_command", "progress_for", "stream_turn"]


def continue_command(path: str, args: argparse.Namespace, steps: int) -> str:
    """The command that continues the turn: always with the sandbox (an absolute path or
    ``docker:IMAGE``), so it works from any folder, and with the run's ``--json``, so the
    output goes on in the same form."""
    words = ["bridge-client", "continue", path]
    if steps:
        words += ["--steps", str(steps)]
    words += ["--sandbox", sandbox_label(args.sandbox)]
    words += ["--agent", args.agent]
    for pair in args.option or []:
        words += ["--option", pair]
    if getattr(args, "json", False):  # a program reading JSON lines reads them on
        words.append("--json")
    if getattr(args, "approve", None):
        words += ["--approve", args.approve]
    for item in getattr(args, "env", None) or []:
        # Only the name: a value may be a secret, and it is to be taken from the environment
        # of the shell that continues (export it there, or add =VALUE).
        words += ["--env", item.partition("=")[0]]
    return " ".join(shlex.quote(w) for w in words)


def _interrupt_once(signum: int, frame: Any) -> None:
    # A second Ctrl-C (or SIGTERM) while the turn is being suspended would interrupt that too
    # (and can leave a lock half-taken inside threading.Condition): ignore any more.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if signum == signal.SIGTERM:
        raise Stopped
    raise KeyboardInterrupt


def progress_for(args: argparse.Namespace) -> Progress:
    """The spinner on stderr, when it is a terminal and ``-v`` does not log there."""
    return Progress(None if args.verbose else sys.stderr)


def _waiting_for(part: Part) -> str:
    """What the spinner says the turn is waiting for after ``part``."""
    if isinstance(part, ToolCall):
        return f"{part.tool_name} running"
    if isinstance(part, ApprovalRequest):
        return "waiting for an answer"
    return "waiting for the agent"


def stream_turn(session: Session, turn: Any, args: argparse.Namespace, progress: Progress) -> int:
    """Read ``turn`` to its end, showing each part; return the exit status: 0 for a turn that
    finished with ``stop``, 1 otherwise, 130 (Ctrl-C) or 143 (SIGTERM) once it is suspended.

    Raises:
        OutputError: writing a part to stdout failed.
    """
    as_json = args.json
    out = sys.stdout
    printer = Printer(out)
    shared_terminal = is_terminal(out)
    handlers: Dict[signal.Signals, Any] = {}
    approver: Optional[Approver] = None

    def on_signal(signum: int, frame: Any) -> None:
        if signum == signal.SIGINT and approver is not None and approver.interrupt():
            return  # Ctrl-C at the question: it answers no
        _interrupt_once(signum, frame)

    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            handlers[signum] = signal.signal(signum, on_signal)
    try:
        approver = begin(args, turn, terminal=progress.output)
        if approver is not None and approver.questions is not None:
            approver.questions.held = lambda held: setattr(progress, "held", held)
        try:
            for part in turn:
                if approver is not None:
                    approver.seen(part)  # a question this part settles is withdrawn first
                with progress.output(_waiting_for(part)):
                    try:
                        if as_json:
                            out.write(part.to_json() + "\n")
                            out.flush()
                        else:
                            printer.show(part)
                    except OSError as exc:
                        raise OutputError(exc) from None
                    if approver is not None:
                        approver.on_part(part)
                    # The spinner draws on its own line only: not after half a line of text.
                    progress.may_draw = printer.at_line_start or not shared_terminal
        except KeyboardInterrupt as exc:
            progress.close()
            if approver is not None:
                approver.close()
            state = turn.suspend()
            path = save_turn_state(state, sandbox_label(args.sandbox), getattr(args, "agent", None))
            command = continue_command(path, args, turn.steps)
            print_err(f"\nsuspended; the turn goes on in the bridge. Continue it with:\n  {command}")
            return 128 + (exc.signum if isinstance(exc, Stopped) else int(signal.SIGINT))
    finally:
        if approver is not None:
            approver.close()
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    finish = turn.finish
    if finish is None:
        print_err("bridge-client: error: the turn ended without turn-finish")
        return 1
    if finish.finish_reason != "stop":
        if as_json:  # the human output's last line says it already
            detail = f": {finish.error}" if finish.error else ""
            print_err(f"bridge-client: turn finished with {finish.finish_reason}{detail}")
        return 1
    return 0

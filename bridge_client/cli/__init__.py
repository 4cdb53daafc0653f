"""The ``bridge-client`` command. See the *Command line* guide (``cli``).

::

    bridge-client run PROMPT... [--sandbox DIR|docker:IMAGE|URL] [--agent NAME|MODULE:CALLABLE]
                      [--option KEY=VALUE]... [--json] [--approve ask|all|none]
                      [--approval-timeout SECONDS] [--state FILE]
    bridge-client continue TURN_STATE_FILE [--steps K] [--rerun-here] [same options as run]
    bridge-client cancel TURN_STATE_FILE [--sandbox DIR] [--timeout SECONDS]
    bridge-client answer TURN_STATE_FILE REQUEST_ID allow|deny|always [--message TEXT]
    bridge-client say TURN_STATE_FILE TEXT...
    bridge-client bridges [--sandbox DIR | --all] [--json]
    bridge-client stop (BRIDGE_ID | --all) [--sandbox DIR] [--timeout SECONDS]
    bridge-client prune [--dry-run] [--min-age SECONDS]
    bridge-client export STATE_FILE OUT [--sandbox DIR] [--agent NAME]
    bridge-client restore EXPORT [PROMPT...] --sandbox NEW [--tell OLD] [--agent NAME]

A PROMPT word ``-`` reads the prompt from standard input, ``@FILE`` from a file.

``python -m bridge_client`` is the same command.

On a terminal, a spinner with the seconds of silence shows on stderr while the turn sends
nothing, and markers are coloured (not when ``NO_COLOR`` is set); piped output gets neither.
``-v`` logs what the client does (connects, launches, resends, resumes, restarts) on stderr.

Exit status: 0 for a turn that finished with ``stop`` (or a command that did its job), 1 for
a turn that finished otherwise or a failure, 2 for bad command-line input, 130 after Ctrl-C and
143 after SIGTERM (the turn is suspended, not cancelled, and the command says how to continue
it), 70 for an unexpected error inside bridge-client (a bug). Every error is one line on stderr
starting ``bridge-client: error:``; the command never prints a traceback.

One module per command (:mod:`~bridge_client.cli.run`, ``continue_``, ``cancel``, ``answer``,
``say``, ``bridges``, ``stop``, ``prune``), each adding its sub-command to the parser; they
use the shared parts below them (``arguments``, ``sandboxes``, ``agents``, ``stream``,
``output``, ``turn_state``, ``exits``, ...) and never each other.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from typing import Any, Optional, Sequence


def _interrupted_while_starting(signum: int, frame: Any) -> None:
    """Ctrl-C while the modules below load: exit 130 quietly, not with an import traceback."""
    raise SystemExit(130)


# Installed only by the process's main thread, and only over Python's own handler; put back
# once the imports are done.
_GUARD_IMPORTS = (
    threading.current_thread() is threading.main_thread()
    and signal.getsignal(signal.SIGINT) is signal.default_int_handler
)
if _GUARD_IMPORTS:
    signal.signal(signal.SIGINT, _interrupted_while_starting)
try:
    from .. import __version__
    from ..errors import ApprovalsUnsupported, HarnessError
    from ..paths import STATE_DIR_HINT, user_home
    from . import answer, bridges, cancel, continue_, export, prune, restore, run, say, stop
    from .arguments import Parser
    from .exits import INTERNAL_ERROR, Failure, OutputError, Stopped, UsageError
    from .output import log_to_stderr, print_err
finally:
    if _GUARD_IMPORTS:
        signal.signal(signal.SIGINT, signal.default_int_handler)

__all__ = ["main", "build_parser", "UsageError", "INTERNAL_ERROR"]


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of ``bridge-client``: each command's module adds its own."""
    parser = Parser(prog="bridge-client", description="Drive an AI agent that lives in a sandbox.")
    parser.add_argument("--version", action="version", version=f"bridge-client {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log what the client does on stderr (DEBUG)"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    commands.required = True
    for command in (run, continue_, bridges, stop, cancel, answer, say, prune, export, restore):
        command.add_command(commands)
    return parser


def _os_error_text(exc: OSError) -> str:
    """An OSError as one line naming what it was about: the state directory when the file is
    in it (``BRIDGE_CLIENT_HOME``), else the file, else the error alone."""
    reason = exc.strerror or str(exc)
    filename = exc.filename if isinstance(exc.filename, str) else None
    if filename is None:
        return reason
    home = user_home()
    hint = STATE_DIR_HINT.format(home=home)
    if reason.startswith(hint):  # the library named the state directory already
        return f"{reason}: {filename}"
    inside = filename.startswith(home.rstrip(os.sep) + os.sep) or home.startswith(filename + os.sep)
    if filename == home or inside:
        return f"{hint}: {reason}: {filename}"
    return f"{filename}: {reason}"


def _stop_on_sigterm(signum: int, frame: Any) -> None:
    raise Stopped


def _run_command(args: argparse.Namespace) -> int:
    """Run the command with SIGTERM raising :class:`Stopped` (as Ctrl-C raises
    KeyboardInterrupt), so that ``timeout`` or ``kill`` before a turn streams unwinds as
    Ctrl-C does: a template step's process (an npm install, in its own session) is killed
    rather than left running, and the exit says so. Only over the default handler, in the
    main thread."""
    main_thread = threading.current_thread() is threading.main_thread()
    guard = main_thread and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    if guard:
        signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        return int(args.func(args))
    finally:
        if guard:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _end_start_guard() -> None:
    """The command's imports are done: a Ctrl-C from here on raises KeyboardInterrupt again
    (each command handles it), instead of the start's quiet exit."""
    from .. import _command_interrupted

    if threading.current_thread() is threading.main_thread():
        if signal.getsignal(signal.SIGINT) is _command_interrupted:
            signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run ``bridge-client`` with ``argv`` (default: ``sys.argv[1:]``); return the exit status.

    Errors are one line on stderr starting ``bridge-client: error:`` (plus a log tail when a
    bridge failed to start), never a traceback: 2 for bad input, 1 for failures, 70 for an
    unexpected error (a bug; ``-v`` logs its traceback).
    """
    if sys.stdout is None:  # started with stdout closed: write nowhere rather than crash
        sys.stdout = open(os.devnull, "w")
    try:
        _end_start_guard()
        args = build_parser().parse_args(argv)
        if args.verbose:
            log_to_stderr()
        return _run_command(args)
    except UsageError as exc:
        print_err(f"bridge-client: error: {exc}")
        return 2
    except ApprovalsUnsupported as exc:  # the bridge's own check (the command's came first)
        lines = str(exc).splitlines()
        reason = (lines[0] if lines else "the agent cannot ask").split(": open the session")[0]
        print_err(f"bridge-client: error: --approve: {reason}; run it without --approve")
        return 2
    except Failure as exc:
        print_err(f"bridge-client: error: {exc}")
        return 1
    except HarnessError as exc:
        lines = str(exc).splitlines()
        print_err(f"bridge-client: error: {lines[0] if lines else type(exc).__name__}")
        tail = getattr(exc, "log_tail", "") or getattr(exc, "output", "")
        if tail:
            print_err(tail)
        return 1
    except Stopped:
        print_err("bridge-client: stopped (SIGTERM)")
        return 128 + Stopped.signum
    except KeyboardInterrupt:
        print_err("bridge-client: interrupted")
        return 130
    except OutputError as exc:
        if not isinstance(exc.error, BrokenPipeError):
            print_err(f"bridge-client: error: cannot write the output: {exc}")
        return 1
    except BrokenPipeError:
        return 1
    except OSError as exc:
        print_err(f"bridge-client: error: {_os_error_text(exc)}")
        return 1
    except Exception as exc:  # noqa: BLE001  the last resort: a message, never a traceback
        logging.getLogger("bridge_client").debug("unexpected error", exc_info=True)
        print_err(
            f"bridge-client: error: unexpected {type(exc).__name__}: {exc or '(no message)'}; "
            "this is a bug in bridge-client: -v logs the details"
        )
        return INTERNAL_ERROR


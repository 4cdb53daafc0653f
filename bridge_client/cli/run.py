"""``bridge-client run PROMPT...``: run one turn and stream its parts. Ctrl-C suspends the turn
(it goes on in the bridge) and prints the ``continue`` command. See the *Command line* guide
(``cli``).
"""
from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from .agents import session_options_for
from .arguments import AGENT_HELP, add_agent_arguments, add_approve_arguments
from .exits import UsageError
from .host_tools import add_tool_arguments, with_tools
from .journal import JOURNAL_HELP
from .prompt import PROMPT_HELP, PromptError, check_utf8, read_prompt
from .stream import progress_for, stream_turn

__all__ = ["add_command"]


def add_command(commands: Any) -> None:
    """Add ``run`` to the ``bridge-client`` sub-commands."""
    run = commands.add_parser(
        "run",
        help="run one turn and stream it",
        description="Run one turn and stream its parts. Ctrl-C suspends it (it goes on in the bridge).",
        epilog=AGENT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("prompt", nargs="+", metavar="PROMPT", help=PROMPT_HELP)
    add_agent_arguments(run, "shell")
    add_approve_arguments(run, state=True)
    add_tool_arguments(run)
    run.add_argument("--journal", action="store_true", help=JOURNAL_HELP)
    run.set_defaults(func=_cmd_run)


def _cmd_run(args: argparse.Namespace) -> int:
    try:
        prompt = read_prompt(args.prompt)
    except PromptError as exc:
        raise UsageError(str(exc)) from None
    check_utf8(prompt)
    if not prompt.strip():
        raise UsageError("the prompt is empty")
    options, session_options = session_options_for(args)
    session_options = with_tools(args, session_options)
    if args.journal:
        session_options = dataclasses.replace(session_options, journal=True)
    from ..agent import create_session  # the host side: loaded by the commands that open a session
    progress = progress_for(args)
    try:
        with create_session(options, session_options) as session:
            return stream_turn(session, session.turn(prompt), args, progress)
    finally:
        progress.close()

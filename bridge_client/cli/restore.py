"""``bridge-client restore EXPORT [PROMPT...] --sandbox NEW [--tell OLD]``: make the session
of an export file live in another sandbox, and run the next turn when a prompt is given; with
``--tell``, the old sandbox's bridge is told where the session went. See the *Portable
sessions* guide (``portable-sessions``).
"""
from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from ..options import Workspace
from .agents import session_options_for
from .arguments import AGENT_HELP, add_agent_arguments
from .exits import UsageError
from .output import print_err, print_out
from .prompt import PROMPT_HELP, PromptError, check_utf8, read_prompt
from .sandboxes import open_sandbox, sandbox_label
from .stream import progress_for, stream_turn

__all__ = ["add_command"]


def add_command(commands: Any) -> None:
    """Add ``restore`` to the ``bridge-client`` sub-commands."""
    restore = commands.add_parser(
        "restore",
        help="restore an exported session into a sandbox",
        description="Make the session of an export file live in the --sandbox given (its bridge "
        "imports the turns and the checkpoint, all or nothing), then run PROMPT as its next turn "
        "when one is given.",
        epilog=AGENT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    restore.add_argument("export", metavar="EXPORT", help="the file `bridge-client export` wrote")
    restore.add_argument("prompt", nargs="*", metavar="PROMPT", help="the next turn's prompt; " + PROMPT_HELP)
    restore.add_argument(
        "--tell", metavar="OLD",
        help="the sandbox the session was exported from, when it can still be reached: its bridge "
        "is told where the session went, and answers every later request for it with that",
    )
    add_agent_arguments(restore, None)
    restore.set_defaults(func=_cmd_restore)


def _cmd_restore(args: argparse.Namespace) -> int:
    if args.sandbox is None:
        raise UsageError("restore needs --sandbox NEW: the sandbox the session goes on in")
    prompt = None
    if args.prompt:
        try:
            prompt = read_prompt(args.prompt)
        except PromptError as exc:
            raise UsageError(str(exc)) from None
        check_utf8(prompt)
        if not prompt.strip():
            raise UsageError("the prompt is empty")
    from ..portable import read_export, restore_session  # the host side

    body = read_export(args.export)
    if args.agent is None:
        args.agent = body["agentId"]
    sandbox = open_sandbox(args.sandbox)
    options, session_options = session_options_for(args, sandbox)
    previous = None
    if args.tell is not None:
        from ..agent import create_session

        old_options = dataclasses.replace(
            session_options, workspace=Workspace(open_sandbox(args.tell)), session_id=body["sessionId"]
        )
        previous = create_session(options, old_options)
    progress = progress_for(args) if prompt is not None else None
    try:
        with restore_session(args.export, session_options, options, previous=previous) as session:
            print_err(
                f"bridge-client: session {session.id} restored into {sandbox_label(args.sandbox)} "
                f"({len(body['turns'])} turns)"
            )
            if prompt is None:
                print_out(session.id)
                return 0
            assert progress is not None
            return stream_turn(session, session.turn(prompt), args, progress)
    finally:
        if progress is not None:
            progress.close()

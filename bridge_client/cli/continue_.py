"""``bridge-client continue TURN_STATE_FILE``: read a suspended turn again, in the bridge that
runs it; refused when that bridge is not in the sandbox (the turn would run again from its
prompt) unless ``--rerun-here``. See the *Command line* guide (``cli``).

(The module's name has an underscore: ``continue`` is a Python keyword.)
"""
from __future__ import annotations

import argparse
import textwrap
from typing import Any

from .agents import session_options_for
from .arguments import AGENT_HELP, add_agent_arguments, add_approve_arguments
from .bridge_dirs import has_bridge
from .exits import UsageError
from .journal import restore_hint
from .output import print_err
from .sandboxes import open_sandbox, sandbox_label
from .stream import progress_for, stream_turn
from .turn_state import read_state, recorded_agent

__all__ = ["add_command"]


def add_command(commands: Any) -> None:
    """Add ``continue`` to the ``bridge-client`` sub-commands."""
    cont = commands.add_parser(
        "continue",
        help="continue a suspended turn",
        # Raw formatting keeps the agents' table of the epilog; the description is wrapped here.
        description=textwrap.fill(
            "Read a turn again from its saved state, in the bridge that runs it (use the same "
            "--agent and --option values as the run; the sandbox defaults to the one the state "
            "file names). When that bridge is not in the sandbox, the turn would run again from "
            "its prompt: refused unless --rerun-here, or the sandbox is the turn's own.",
            79,
        ),
        epilog=AGENT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cont.add_argument(
        "turn_state_file", metavar="TURN_STATE_FILE",
        help="the file a suspend (or run --state, run --approve) wrote, or the output of run --json "
        "saved in a file (its first line, the turn-start part, holds the turn state; it names no "
        "sandbox: give --sandbox)",
    )
    cont.add_argument(
        "--steps", type=int, default=0, metavar="K", help="complete steps you already have (skipped)"
    )
    cont.add_argument(
        "--rerun-here",
        action="store_true",
        help="allow running the turn again from its prompt in this sandbox when its bridge is not here",
    )
    add_agent_arguments(cont, None)
    add_approve_arguments(cont, state=False)
    cont.set_defaults(func=_cmd_continue)


def _cmd_continue(args: argparse.Namespace) -> int:
    state, recorded = read_state(args.turn_state_file)
    if args.steps < 0:
        raise UsageError("--steps must be >= 0")
    if args.agent is None:
        args.agent = recorded_agent(args.turn_state_file) or state.agent_id
    if args.sandbox is None and recorded is not None:
        args.sandbox = recorded  # the sandbox the turn runs in, not the current folder
    try:
        sandbox = open_sandbox(args.sandbox)
    except UsageError as exc:
        hint = restore_hint(state.session_id)  # the sandbox is gone: the journal brings it back
        raise UsageError(f"{exc}{hint}") if hint else exc from None
    here = sandbox_label(args.sandbox)
    if not has_bridge(sandbox, state):
        where = f"it ran in {recorded}" if recorded is not None else "the file does not say where it ran"
        if recorded != here and not args.rerun_here:
            raise UsageError(
                f"the turn's bridge {state.bridge_id} is not in {here} ({where}): continuing would run "
                "the whole turn again from its prompt here, commands and all; use the turn's --sandbox, "
                "or pass --rerun-here to run it again here"
            )
        print_err(
            f"bridge-client: the turn's bridge is gone from {here}: the turn runs again from its prompt"
        )
    options, session_options = session_options_for(args, sandbox)
    from ..agent import create_session  # the host side: loaded by the commands that open a session
    progress = progress_for(args)
    try:
        with create_session(options, session_options) as session:
            return stream_turn(session, session.continue_turn(state, steps=args.steps), args, progress)
    finally:
        progress.close()

"""``bridge-client export STATE_FILE OUT``: write the session of a saved turn state to one
export file (for ``bridge-client restore`` in another sandbox). See the *Portable sessions*
guide (``portable-sessions``).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
from typing import Any

from .agents import session_options_for
from .arguments import AGENT_HELP, add_agent_arguments
from .exits import UsageError
from .output import print_err, print_out
from .sandboxes import open_sandbox
from .turn_state import read_state, recorded_agent

__all__ = ["add_command"]


def add_command(commands: Any) -> None:
    """Add ``export`` to the ``bridge-client`` sub-commands."""
    export = commands.add_parser(
        "export",
        help="write a session to one export file",
        description="Write the session of a turn state (its state, turns, parts and checkpoints) "
        "to one export file, atomically, for `bridge-client restore` in another sandbox.",
        epilog=AGENT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    export.add_argument(
        "state_file", metavar="STATE_FILE",
        help="a turn state file of the session (the file a suspend or run --state wrote, or the "
        "output of run --json)",
    )
    export.add_argument("out", metavar="OUT", help="the export file to write (replaced whole, mode 0600)")
    add_agent_arguments(export, None)
    export.set_defaults(func=_cmd_export)


def _cmd_export(args: argparse.Namespace) -> int:
    state, recorded = read_state(args.state_file)
    folder = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(folder):
        raise UsageError(f"OUT: the folder {folder} does not exist")
    if args.agent is None:
        args.agent = recorded_agent(args.state_file) or state.agent_id
    if args.sandbox is None and recorded is not None:
        args.sandbox = recorded
    sandbox = open_sandbox(args.sandbox)
    options, session_options = session_options_for(args, sandbox)
    session_options = dataclasses.replace(session_options, session_id=state.session_id)
    from ..agent import create_session  # the host side: loaded by the commands that open a session

    with create_session(options, session_options) as session:
        path = session.export(args.out)
    print_err(f"bridge-client: session {state.session_id} exported to {path}")
    print_err(f"bridge-client: restore it with: bridge-client restore {shlex.quote(path)} --sandbox NEW")
    print_out(path)
    return 0

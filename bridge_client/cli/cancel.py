"""``bridge-client cancel TURN_STATE_FILE``: cancel a turn that goes on in its bridge.

Ctrl-C during ``run`` suspends a turn (it keeps running in the bridge) and saves its state
in a file; this command asks that bridge to cancel the turn and waits for it to finish as
``cancelled``. It never runs the turn again: when the turn's bridge is not in the sandbox,
there is nothing running to cancel and it says so. See the *Command line* guide (``cli``).
"""
from __future__ import annotations

import argparse
import json
import posixpath
import threading
from typing import Any

from ..bridge import identity
from .agents import session_options_for
from .arguments import SANDBOX_HELP, add_verbose
from .bridge_dirs import has_bridge
from .exits import Failure, UsageError
from .output import print_out
from .sandboxes import open_sandbox, sandbox_label
from .turn_state import read_turn_state

__all__ = ["add_command"]

_HELP = "cancel a turn that goes on in its bridge (from its saved state file)"
_DESCRIPTION = (
    "Cancel a turn that goes on in its bridge, such as one suspended with Ctrl-C: the bridge "
    "stops the agent, and the turn finishes as 'cancelled'. The turn is never run again; a turn "
    "that already finished is left as it is. Exit status 0 when the turn has finished."
)


def add_command(commands: Any) -> None:
    """Add ``cancel`` to the ``bridge-client`` sub-commands."""
    sandbox_help: str = SANDBOX_HELP
    p = commands.add_parser("cancel", help=_HELP, description=_DESCRIPTION)
    p.add_argument("turn_state_file", metavar="TURN_STATE_FILE", help="the file `run` printed when suspended")
    p.add_argument(
        "--sandbox", metavar="DIR",
        help=sandbox_help.replace("(default: the current folder)", "(default: the one the turn state names)"),
    )
    p.add_argument(
        "--agent", metavar="AGENT",
        help="the agent the turn runs with, when it is your own MODULE:CALLABLE driver (default: "
        "the agent the turn state names)",
    )
    p.add_argument(
        "--timeout", type=float, default=30.0,
        help="seconds to wait for the turn to finish after the cancel (default: %(default)g)",
    )
    add_verbose(p)
    p.set_defaults(func=_cmd_cancel)


def _cmd_cancel(args: argparse.Namespace) -> int:
    if args.timeout <= 0:
        raise UsageError("--timeout must be > 0")
    state, recorded = read_turn_state(args.turn_state_file)
    if args.sandbox is None and recorded is not None:
        args.sandbox = recorded
    sandbox = open_sandbox(args.sandbox)
    here = sandbox_label(args.sandbox)
    if not has_bridge(sandbox, state):
        raise Failure(
            f"the turn's bridge {state.bridge_id} is not in {here}: nothing runs there to cancel "
            "(give the turn's --sandbox if it ran elsewhere)"
        )
    # The turn's own bridge: the same agent and agent options as it was launched with.
    folder = identity.state_dir(sandbox.state_root, state.bridge_id)
    launch = identity.parse_launch(sandbox.read_file(posixpath.join(folder, identity.LAUNCH_FILE)))
    options = launch.agent_options if isinstance(launch.agent_options, dict) else {}
    args.agent = args.agent or state.agent_id
    args.option = [f"{key}={json.dumps(value)}" for key, value in options.items()]
    bridge_options, session_options = session_options_for(args, sandbox)
    from ..agent import create_session  # the host side: loaded by the commands that open a session

    with create_session(bridge_options, session_options) as session:
        turn = session.continue_turn(state)
        answer = turn.cancel()
        already = answer is not None and answer.status == "finished"
        # Read to turn-finish; a driver that ignores the cancel must not hold the command.
        timer = threading.Timer(args.timeout, turn.suspend)
        timer.daemon = True
        timer.start()
        try:
            for _ in turn:
                pass
        finally:
            timer.cancel()
        finish = turn.finish
    if finish is None:
        raise Failure(
            f"turn {state.turn_id} did not finish within {args.timeout:g} s of the cancel; "
            "it may still stop: see `bridge-client bridges`"
        )
    if finish.finish_reason == "cancelled" and not already:
        print_out(f"cancelled turn {state.turn_id}")
    else:
        print_out(f"turn {state.turn_id} had already finished ({finish.finish_reason}); nothing to cancel")
    return 0

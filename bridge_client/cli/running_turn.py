"""Reaching a running turn from another shell, for ``bridge-client answer`` and ``bridge-client
say``: they take the turn's state file (the one ``run --approve`` or ``run --state FILE``
writes at turn start, the one a suspend writes, or a saved ``turn-start`` line of ``run
--json``), reach the turn's own bridge (the agent and options it was launched with, read from
its state directory, like ``cancel``), and leave the turn running. They never run the turn
again: when its bridge is not in the sandbox, they say so. See the *Interactive turns* guide
(``interactive``).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import posixpath
import shlex
from typing import Any, Callable, Iterator

from ..state_dir import identity
from .agents import session_options_for
from .arguments import SANDBOX_HELP, add_verbose
from .bridge_dirs import has_bridge, removed_folder
from .exits import Failure, UsageError
from .sandboxes import open_sandbox, sandbox_label
from .turn_state import read_state, recorded_agent

__all__ = ["STATE_HELP", "add_turn_arguments", "reach_turn"]

STATE_HELP = (
    "the turn's state file: the one `run --approve` or `run --state FILE` wrote at turn start, "
    "the one a suspend wrote, or the turn-start line of `run --json` saved in a file"
)
"""The help of ``TURN_STATE_FILE``."""


def add_turn_arguments(p: argparse.ArgumentParser, command: Callable[[argparse.Namespace], int]) -> None:
    """Add ``--sandbox``, ``--agent`` and ``-v`` to ``answer`` or ``say``, which runs ``command``."""
    sandbox_help = SANDBOX_HELP.replace(
        "(default: the current folder)", "(default: the one the turn state names)"
    )
    p.add_argument("--sandbox", metavar="DIR", help=sandbox_help)
    p.add_argument(
        "--agent", metavar="AGENT",
        help="the agent the turn runs with, when it is your own MODULE:CALLABLE driver (default: "
        "the agent the turn state names)",
    )
    add_verbose(p)
    p.set_defaults(func=command)


@contextlib.contextmanager
def reach_turn(args: argparse.Namespace, absent: str = "no turn runs there") -> Iterator[Any]:
    """The turn of the state file, read in its own bridge: a new session of this process
    continues it (``StartTurn`` of a running turn only reads it) and is released afterwards;
    the turn goes on in the bridge unless the caller ended it. ``answer``, ``say`` and
    ``cancel`` reach a turn this way; ``absent`` ends the message when its bridge is not there.

    Raises:
        Failure: the turn's bridge is not in the sandbox (nothing runs there), or its local
            folder was removed (its bridges can still be stopped).
    """
    state, recorded = read_state(args.turn_state_file)
    if args.sandbox is None and recorded is not None:
        args.sandbox = recorded
    try:
        sandbox = open_sandbox(args.sandbox)
    except UsageError:
        if args.sandbox and removed_folder(args.sandbox) is not None:  # rm -rf while it ran
            raise Failure(
                f"the sandbox folder {args.sandbox} was removed, so its turn cannot be reached; "
                "its bridges may still run: stop them with "
                f"`bridge-client stop --all --sandbox {shlex.quote(args.sandbox)}`"
            ) from None
        raise
    here = sandbox_label(args.sandbox)
    if not has_bridge(sandbox, state):
        raise Failure(
            f"the turn's bridge {state.bridge_id} is not in {here}: {absent} "
            "(give the turn's --sandbox if it ran elsewhere)"
        )
    folder = identity.state_dir(sandbox.state_root, state.bridge_id)
    launch = identity.parse_launch(sandbox.read_file(posixpath.join(folder, identity.LAUNCH_FILE)))
    options = launch.agent_options if isinstance(launch.agent_options, dict) else {}
    args.agent = args.agent or recorded_agent(args.turn_state_file) or state.agent_id
    args.option = [f"{key}={json.dumps(value)}" for key, value in options.items()]
    bridge_options, session_options = session_options_for(args, sandbox)
    from ..agent import create_session  # the host side: loaded by the commands that open a session
    with create_session(bridge_options, session_options) as session:
        turn = session.continue_turn(state)
        try:
            yield turn
        finally:
            turn.suspend()

"""``bridge-client bridges`` (or ``bridge-client list``): list the bridges of a sandbox, or of
every local sandbox (``--all``). See the *Command line* guide (``cli``).
"""
from __future__ import annotations

import argparse
from typing import Any

from ..paths import user_home
from .arguments import SANDBOX_HELP, add_verbose
from .bridge_dirs import LocalStateRoot, local_state_roots, print_bridges
from .exits import UsageError
from .output import print_out
from .sandboxes import open_sandbox

__all__ = ["add_command"]


def add_command(commands: Any) -> None:
    """Add ``bridges``, and ``list`` as its alias, to the ``bridge-client`` sub-commands."""
    bridges = commands.add_parser(
        "bridges",
        aliases=["list"],
        help="list the bridges of a sandbox, or of every local sandbox (--all); alias: list",
        description="List bridges: id, agent, agent options, pid, port, whether it answers, and "
        "its sessions and turns. --all lists every local sandbox under the state directory.",
    )
    bridges.add_argument(
        "--sandbox", metavar="DIR", help=SANDBOX_HELP
    )
    bridges.add_argument(
        "--all", action="store_true", help="every local sandbox under the state directory (not containers)"
    )
    bridges.add_argument("--json", action="store_true", help="print one JSON object per bridge")
    add_verbose(bridges)
    bridges.set_defaults(func=_cmd_bridges)


def _cmd_bridges(args: argparse.Namespace) -> int:
    if args.all:
        if args.sandbox is not None:
            raise UsageError("give --sandbox or --all, not both")
        roots = [LocalStateRoot(root) for root in local_state_roots()]
        return print_bridges(roots, args.json, f"no bridges under {user_home()}", print_out)
    sandbox = open_sandbox(args.sandbox, removed_ok=True)
    return print_bridges([sandbox], args.json, f"no bridges in {sandbox.workdir}", print_out)

"""``bridge-client cancel TURN_STATE_FILE``: cancel a turn that goes on in its bridge.

Ctrl-C during ``run`` suspends a turn (it keeps running in the bridge) and saves its state
in a file; this command asks that bridge to cancel the turn and waits for it to finish as
``cancelled``. It never runs the turn again: when the turn's bridge is not in the sandbox,
there is nothing running to cancel and it says so. See the *Command line* guide (``cli``).
"""
from __future__ import annotations

import argparse
import shlex
import signal
import threading
from typing import Any, Optional

from .exits import Failure, Stopped, UsageError
from .output import print_err, print_out
from .running_turn import add_turn_arguments, reach_turn

__all__ = ["add_command"]

_HELP = "cancel a turn that goes on in its bridge (from its saved state file)"
_DESCRIPTION = (
    "Cancel a turn that goes on in its bridge, such as one suspended with Ctrl-C: the bridge "
    "stops the agent, and the turn finishes as 'cancelled'. The turn is never run again; a turn "
    "that already finished is left as it is. Exit status 0 when the turn has finished."
)


def add_command(commands: Any) -> None:
    """Add ``cancel`` to the ``bridge-client`` sub-commands."""
    p = commands.add_parser("cancel", help=_HELP, description=_DESCRIPTION)
    p.add_argument("turn_state_file", metavar="TURN_STATE_FILE", help="the file `run` printed when suspended")
    p.add_argument(
        "--timeout", type=float, default=30.0,
        help="seconds to wait for the turn to finish after the cancel (default: %(default)g)",
    )
    add_turn_arguments(p, _cmd_cancel)


def _cmd_cancel(args: argparse.Namespace) -> int:
    if args.timeout <= 0:
        raise UsageError("--timeout must be > 0")
    # One handler from the cancel's request to the session's release: a Ctrl-C anywhere in
    # between says what is known of the cancel (under load it landed in the steps between two
    # narrower handlers and printed only "interrupted").
    turn_id: Optional[str] = None  # once the cancel is asked
    sent = ended = False  # its answer seen; the turn's end seen
    finish: Any = None
    try:
        with reach_turn(args, absent="nothing runs there to cancel") as turn:
            turn_id = turn.id
            answer = turn.cancel()
            sent = True
            already = answer is not None and answer.status == "finished"
            # Read to turn-finish; a driver that ignores the cancel must not hold the command.
            timer = threading.Timer(args.timeout, turn.suspend)
            timer.daemon = True
            try:
                timer.start()
                for _ in turn:
                    pass
            finally:
                timer.cancel()
            finish = turn.finish
            ended = finish is not None
    except KeyboardInterrupt as exc:
        if turn_id is None:
            raise  # nothing was asked of the bridge
        if ended:
            print_err(f"bridge-client: interrupted; turn {turn_id} had finished ({finish.finish_reason})")
        elif sent:
            print_err(f"bridge-client: interrupted; the cancel of turn {turn_id} was sent, its end not seen")
        else:  # its answer not seen: it may or may not be in the bridge
            print_err(
                f"bridge-client: interrupted; the cancel of turn {turn_id} may not have reached "
                f"the bridge: run `bridge-client cancel {shlex.quote(args.turn_state_file)}` again"
            )
        return 128 + (exc.signum if isinstance(exc, Stopped) else int(signal.SIGINT))
    if finish is None:
        raise Failure(
            f"turn {turn_id} did not finish within {args.timeout:g} s of the cancel; "
            "it may still stop: see `bridge-client bridges`"
        )
    if finish.finish_reason == "cancelled" and not already:
        print_out(f"cancelled turn {turn_id}")
    else:
        print_out(f"turn {turn_id} had already finished ({finish.finish_reason}); nothing to cancel")
    return 0

"""``bridge-client say TURN_STATE_FILE TEXT...``: add a message to a running turn from another
shell, without running the turn again (see :mod:`bridge_client.cli.running_turn`). See the
*Command line* guide (``cli``) and the *Interactive turns* guide (``interactive``).
"""
from __future__ import annotations

import argparse
from typing import Any

from ..errors import MessagesUnsupported, TurnNotFound, TurnNotRunning
from .exits import Failure, UsageError
from .output import print_out
from .prompt import PromptError, check_utf8, read_prompt
from .running_turn import STATE_HELP, add_turn_arguments, reach_turn

__all__ = ["add_command"]

_SAY_DESCRIPTION = (
    "Add a message to a running turn, from another shell: the agent takes it at once or at its "
    "next step, and the turn's log records it (a user-message part). Give --id to send it again "
    "safely (the same id and text are one message; after the turn finished, a resend of a "
    "message it took says 'already delivered'). Exit status 0 when the turn took it."
)


def add_command(commands: Any) -> None:
    """Add ``say`` to the ``bridge-client`` sub-commands."""
    say = commands.add_parser(
        "say", help="add a message to a running turn from another shell", description=_SAY_DESCRIPTION
    )
    say.add_argument("turn_state_file", metavar="TURN_STATE_FILE", help=STATE_HELP)
    say.add_argument(
        "text", nargs="+", metavar="TEXT",
        help="the message; several are joined as lines. '-' reads it from standard input, @FILE from FILE",
    )
    say.add_argument("--id", metavar="MESSAGE_ID", help="the message's id (default: a new random one)")
    add_turn_arguments(say, _cmd_say)


def _cmd_say(args: argparse.Namespace) -> int:
    try:
        text = read_prompt(args.text)
    except PromptError as exc:
        raise UsageError(str(exc).replace("prompt", "message")) from None
    check_utf8(text)
    if not text.strip():
        raise UsageError("the message is empty")
    with reach_turn(args) as turn:
        tid = turn.id
        finished = turn.status == "finished"
        if finished and args.id is None:  # a new id: nothing to resend
            raise Failure(f"turn {tid} has finished: it takes no more messages")
        try:  # a finished turn still answers for the ids it took: a resend is safe
            message_id = turn.say(text, message_id=args.id)
        except TurnNotRunning:
            raise Failure(f"turn {tid} has finished: it takes no more messages") from None
        except MessagesUnsupported:
            raise Failure(
                f"agent {turn.state.agent_id!r} cannot take messages during a turn; "
                "wait for the turn to finish and start another"
            ) from None
        except TurnNotFound:
            raise Failure(f"the bridge does not know turn {tid}") from None
    if finished:
        print_out(f"message {message_id} already delivered to turn {tid} (the turn has finished)")
    else:
        print_out(f"message {message_id} sent to turn {tid}")
    return 0

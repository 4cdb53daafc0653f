"""``bridge-client answer TURN_STATE_FILE REQUEST_ID allow|deny|always``: answer a running turn's
request (an approval-request part) from another shell, without running the turn again (see
:mod:`bridge_client.cli.running_turn`). See the *Command line* guide (``cli``) and the
*Interactive turns* guide (``interactive``).
"""
from __future__ import annotations

import argparse
from typing import Any

from ..errors import ApprovalConflict, ApprovalExpired, ApprovalNotFound, TurnNotFound, TurnNotRunning
from .arguments import one_of
from .exits import Failure, UsageError
from .output import print_out
from .running_turn import STATE_HELP, add_turn_arguments, reach_turn

__all__ = ["add_command", "DECISIONS"]

DECISIONS = {"allow": "allow-once", "always": "allow-always", "deny": "deny"}
"""The answers ``bridge-client answer`` takes, and the decision each one sends."""
_ANSWER_DESCRIPTION = (
    "Answer a request of a running turn (an approval-request part), from another shell: allow "
    "it once, allow that tool always (for the rest of the session), or deny it, with an optional "
    "message for the agent. Sending the same answer again is safe; a different one is refused "
    "and the first answer is named. Exit status 0 when the answer is recorded."
)


def add_command(commands: Any) -> None:
    """Add ``answer`` to the ``bridge-client`` sub-commands."""
    answer = commands.add_parser(
        "answer", help="answer a running turn's request from another shell", description=_ANSWER_DESCRIPTION
    )
    answer.add_argument("turn_state_file", metavar="TURN_STATE_FILE", help=STATE_HELP)
    answer.add_argument("request_id", metavar="REQUEST_ID", help="the requestId of the approval-request part")
    answer.add_argument("decision", metavar="allow|deny|always", type=one_of(tuple(DECISIONS)))
    answer.add_argument(
        "--message", metavar="TEXT", help="a message for the agent with the answer (why it is denied)"
    )
    add_turn_arguments(answer, _cmd_answer)


def _recorded_text(recorded: Any) -> str:
    """``deny by host: not now`` for a recorded answer (a part, a dict, or unknown)."""
    if isinstance(recorded, dict):
        decision, by, message = recorded.get("decision"), recorded.get("by"), recorded.get("message")
    else:
        decision = getattr(recorded, "decision", None)
        by, message = getattr(recorded, "by", None), getattr(recorded, "message", None)
    if decision is None:
        return "another answer"
    return f"{decision}" + (f" by {by}" if by else "") + (f": {message}" if message else "")


def _cmd_answer(args: argparse.Namespace) -> int:
    decision = DECISIONS[args.decision]
    if args.message is not None and not args.message.strip():
        raise UsageError("--message is empty")
    with reach_turn(args) as turn:
        rid, tid = args.request_id, turn.id
        try:
            if decision == "deny":
                result = turn.deny(rid, message=args.message)
            else:
                result = turn.approve(rid, always=decision == "allow-always", message=args.message)
        except ApprovalConflict as exc:
            raise Failure(
                f"request {rid} was already answered ({_recorded_text(exc.recorded)}); "
                "an answer cannot be changed"
            ) from None
        except ApprovalNotFound:
            raise Failure(f"turn {tid} has no request {rid} (see its approval-request parts)") from None
        except ApprovalExpired as exc:
            recorded = getattr(exc, "recorded", None)
            first = f" (it was answered: {_recorded_text(recorded)})" if recorded is not None else ""
            raise Failure(f"request {rid} can no longer be answered{first}: {exc}") from None
        except TurnNotFound:
            raise Failure(f"the bridge does not know turn {tid}") from None
        except TurnNotRunning:
            raise Failure(f"turn {tid} has finished: request {rid} can no longer be answered") from None
    print_out(f"request {rid}: {_recorded_text(result)}")
    return 0

"""``bridge-client answer`` and ``bridge-client say``: take part in a running turn from
another shell.

Both take the turn's state file: the one ``run --approve`` (or ``run --state FILE``) writes at
turn start, the one a suspend writes, or a saved ``turn-start`` line of ``run --json``. They
reach the turn's own bridge (the agent and options it was launched with, read from its state
directory, like ``cancel``), send one request, and leave the turn running. They never run the
turn again: when its bridge is not in the sandbox, they say so. See the *Command line* guide
(``cli``) and the *Interactive turns* guide (``interactive``).
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import posixpath
from typing import Any, Iterator, Optional, Tuple

from .bridge import identity
from .cli_interactive import one_of
from .errors import (
    ApprovalConflict,
    ApprovalExpired,
    ApprovalNotFound,
    MessagesUnsupported,
    TurnNotFound,
    TurnNotRunning,
)
from .wire.parts import TurnState

__all__ = ["add_answer_commands", "DECISIONS"]

DECISIONS = {"allow": "allow-once", "always": "allow-always", "deny": "deny"}
"""The answers ``bridge-client answer`` takes, and the decision each one sends."""

_STATE_HELP = (
    "the turn's state file: the one `run --approve` or `run --state FILE` wrote at turn start, "
    "the one a suspend wrote, or the turn-start line of `run --json` saved in a file"
)
_ANSWER_DESCRIPTION = (
    "Answer a request of a running turn (an approval-request part), from another shell: allow "
    "it once, allow that tool always (for the rest of the session), or deny it, with an optional "
    "message for the agent. Sending the same answer again is safe; a different one is refused "
    "and the first answer is named. Exit status 0 when the answer is recorded."
)
_SAY_DESCRIPTION = (
    "Add a message to a running turn, from another shell: the agent takes it at once or at its "
    "next step, and the turn's log records it (a user-message part). Give --id to send it again "
    "safely (the same id and text are one message). Exit status 0 when the turn took it."
)


def add_answer_commands(commands: Any, cli: Any) -> None:
    """Add ``answer`` and ``say`` to the ``bridge-client`` sub-commands; ``cli`` is the module
    whose ``main`` runs (see ``add_cancel_command``)."""
    sandbox_help: str = cli._SANDBOX_HELP.replace(
        "(default: the current folder)", "(default: the one the turn state names)"
    )
    answer = commands.add_parser(
        "answer", help="answer a running turn's request from another shell", description=_ANSWER_DESCRIPTION
    )
    answer.add_argument("turn_state_file", metavar="TURN_STATE_FILE", help=_STATE_HELP)
    answer.add_argument("request_id", metavar="REQUEST_ID", help="the requestId of the approval-request part")
    answer.add_argument("decision", metavar="allow|deny|always", type=one_of(tuple(DECISIONS)))
    answer.add_argument(
        "--message", metavar="TEXT", help="a message for the agent with the answer (why it is denied)"
    )
    say = commands.add_parser(
        "say", help="add a message to a running turn from another shell", description=_SAY_DESCRIPTION
    )
    say.add_argument("turn_state_file", metavar="TURN_STATE_FILE", help=_STATE_HELP)
    say.add_argument(
        "text", nargs="+", metavar="TEXT",
        help="the message; several are joined as lines. '-' reads it from standard input, @FILE from FILE",
    )
    say.add_argument("--id", metavar="MESSAGE_ID", help="the message's id (default: a new random one)")
    for p, run in ((answer, _cmd_answer), (say, _cmd_say)):
        p.add_argument("--sandbox", metavar="DIR", help=sandbox_help)
        p.add_argument(
            "--agent", metavar="AGENT",
            help="the agent the turn runs with, when it is your own MODULE:CALLABLE driver (default: "
            "the agent the turn state names)",
        )
        cli._add_verbose(p)
        p.set_defaults(func=functools.partial(run, cli=cli))


def read_state(path: str, cli: Any) -> Tuple[TurnState, Optional[str]]:
    """The turn state in ``path`` and the sandbox it names (``None`` when it names none): a
    saved turn state, or a ``turn-start`` part (one JSON line of ``run --json``, the first
    line of a file of them).

    Raises:
        UsageError: the file cannot be read or holds neither.
    """
    try:
        with open(path, "rb") as f:
            first = f.readline(4 * 1024 * 1024 + 65536)
    except OSError as exc:
        raise cli.UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        record = json.loads(first)
    except ValueError:
        record = None
    turn = record.get("turn") if isinstance(record, dict) and record.get("type") == "turn-start" else None
    if isinstance(turn, dict):
        try:
            return TurnState.from_dict(turn), None
        except ValueError as exc:
            raise cli.UsageError(f"{path} is not a turn state: {exc}") from None
    state, recorded = cli._read_turn_state(path)
    return state, recorded


@contextlib.contextmanager
def _turn(args: argparse.Namespace, cli: Any) -> Iterator[Any]:
    """The turn of the state file, read in its own bridge: a new session of this process
    continues it (``StartTurn`` of a running turn only reads it) and is released afterwards;
    the turn goes on in the bridge.

    Raises:
        _Failure: the turn's bridge is not in the sandbox (nothing runs there).
    """
    state, recorded = read_state(args.turn_state_file, cli)
    if args.sandbox is None and recorded is not None:
        args.sandbox = recorded
    sandbox = cli._sandbox(args.sandbox)
    here = cli._sandbox_label(args.sandbox)
    if not cli._has_bridge(sandbox, state):
        raise cli._Failure(
            f"the turn's bridge {state.bridge_id} is not in {here}: no turn runs there "
            "(give the turn's --sandbox if it ran elsewhere)"
        )
    folder = identity.state_dir(sandbox.state_root, state.bridge_id)
    launch = identity.parse_launch(sandbox.read_file(posixpath.join(folder, identity.LAUNCH_FILE)))
    options = launch.agent_options if isinstance(launch.agent_options, dict) else {}
    args.agent = args.agent or state.agent_id
    args.option = [f"{key}={json.dumps(value)}" for key, value in options.items()]
    bridge_options, session_options = cli._session_options(args, sandbox)
    from .agent import create_session

    with create_session(bridge_options, session_options) as session:
        turn = session.continue_turn(state)
        try:
            yield turn
        finally:
            turn.suspend()


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


def _cmd_answer(args: argparse.Namespace, cli: Any) -> int:
    decision = DECISIONS[args.decision]
    if args.message is not None and not args.message.strip():
        raise cli.UsageError("--message is empty")
    with _turn(args, cli) as turn:
        rid, tid = args.request_id, turn.id
        try:
            if decision == "deny":
                result = turn.deny(rid, message=args.message)
            else:
                result = turn.approve(rid, always=decision == "allow-always", message=args.message)
        except ApprovalConflict as exc:
            raise cli._Failure(
                f"request {rid} was already answered ({_recorded_text(exc.recorded)}); "
                "an answer cannot be changed"
            ) from None
        except ApprovalNotFound:
            raise cli._Failure(f"turn {tid} has no request {rid} (see its approval-request parts)") from None
        except ApprovalExpired as exc:
            recorded = getattr(exc, "recorded", None)
            first = f" (it was answered: {_recorded_text(recorded)})" if recorded is not None else ""
            raise cli._Failure(f"request {rid} can no longer be answered{first}: {exc}") from None
        except TurnNotFound:
            raise cli._Failure(f"the bridge does not know turn {tid}") from None
        except TurnNotRunning:
            raise cli._Failure(f"turn {tid} has finished: request {rid} can no longer be answered") from None
    cli._print(f"request {rid}: {_recorded_text(result)}")
    return 0


def _cmd_say(args: argparse.Namespace, cli: Any) -> int:
    from .cli_input import PromptError, read_prompt

    try:
        text = read_prompt(args.text)
    except PromptError as exc:
        raise cli.UsageError(str(exc).replace("prompt", "message")) from None
    cli._check_utf8(text)
    if not text.strip():
        raise cli.UsageError("the message is empty")
    with _turn(args, cli) as turn:
        tid = turn.id
        if turn.status == "finished":
            raise cli._Failure(f"turn {tid} has finished: it takes no more messages")
        try:
            message_id = turn.say(text, message_id=args.id)
        except TurnNotRunning:
            raise cli._Failure(f"turn {tid} has finished: it takes no more messages") from None
        except MessagesUnsupported:
            raise cli._Failure(
                f"agent {turn.state.agent_id!r} cannot take messages during a turn; "
                "wait for the turn to finish and start another"
            ) from None
        except TurnNotFound:
            raise cli._Failure(f"the bridge does not know turn {tid}") from None
    cli._print(f"message {message_id} sent to turn {tid}")
    return 0

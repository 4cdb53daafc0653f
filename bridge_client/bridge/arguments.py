"""The bridge program's command line: ``--driver`` and the bounds, parsed and
checked, and handed on as keywords.
"""
from __future__ import annotations

import argparse
from typing import Any, Dict, Optional, Sequence

from ..state_dir import identity

__all__ = ["limits", "parse"]

def parse(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    """Parse the bridge program's arguments; exits 2 with a usage line when they are wrong."""
    parser = argparse.ArgumentParser(
        prog="python -m bridge_client.bridge",
        description="Serve an agent's driver over the bridge protocol (state directory from "
        f"{identity.STATE_DIR_ENV}).",
    )
    parser.add_argument("--driver", required=True, help="echo, shell, or MODULE:CALLABLE (a driver factory)")
    parser.add_argument(
        "--max-connections",
        type=_positive_int,
        default=None,
        metavar="N",
        help="TCP connections at most at once; beyond, HTTP 503 (default: what the open-files "
        "limit leaves room for, 8 to 512)",
    )
    parser.add_argument(
        "--max-handshakes",
        type=_positive_int,
        default=None,
        metavar="N",
        help="connections at most still sending their HTTP request; a new one drops the oldest "
        "(default 64)",
    )
    parser.add_argument(
        "--handshake-timeout",
        type=_positive_seconds,
        default=None,
        metavar="SECONDS",
        help="seconds a new connection has to send its whole HTTP request (default 5)",
    )
    parser.add_argument(
        "--send-timeout",
        type=_positive_seconds,
        default=None,
        metavar="SECONDS",
        help="seconds one frame may take to go into a connection's socket; a peer that reads "
        "nothing for that long is dropped (default 30)",
    )
    parser.add_argument(
        "--cancel-grace",
        type=_positive_seconds,
        default=None,
        metavar="SECONDS",
        help="seconds a driver has to end a cancelled turn; then the bridge ends it as "
        "cancelled and kills the processes the driver reported (default 5)",
    )
    parser.add_argument(
        "--max-streams",
        type=_positive_int,
        default=None,
        metavar="N",
        help="turn reads (ReadTurn) at once in all; beyond, a retryable Overloaded failure "
        "(default 256, less under a small task limit)",
    )
    parser.add_argument(
        "--synchronous",
        choices=("FULL", "NORMAL"),
        default=None,
        help="the store's fsync level: FULL (default) fsyncs every commit, so what a reader saw "
        "survives a power loss; NORMAL is faster, and a power loss may lose the last parts",
    )
    parser.add_argument(
        "--max-turns",
        type=_positive_int,
        default=None,
        metavar="N",
        help="turns running at once; beyond, StartTurn gets a retryable Overloaded failure "
        "(default 256, less under a small task limit)",
    )
    return parser.parse_args(argv)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a number of seconds > 0")
    return value


def limits(args: argparse.Namespace) -> Dict[str, Any]:
    """The limits given on the command line, as BridgeServer keywords (and ``cancel_grace``,
    ``max_turns`` for the turn manager)."""
    given = {
        "max_connections": args.max_connections,
        "max_handshakes": args.max_handshakes,
        "handshake_timeout": args.handshake_timeout,
        "send_timeout": args.send_timeout,
        "cancel_grace": args.cancel_grace,
        "max_streams": args.max_streams,
        "max_turns": args.max_turns,
        "synchronous": args.synchronous,
    }
    return {key: value for key, value in given.items() if value is not None}

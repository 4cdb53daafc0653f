"""``bridge-client stop (BRIDGE_ID | --all)``: stop a bridge cleanly (SIGTERM, after checking it
answers as that bridge). A bridge that is not running is not an error. See the *Command line*
guide (``cli``).
"""
from __future__ import annotations

import argparse
import posixpath
import time
from typing import Any

from ..state_dir import identity
from ..errors import ConnectionLost, HarnessError, Unauthorized
from ..paths import SECRET_ENV, default_secret
from ..redacted import hmac_token
from ..sandbox.base import Sandbox
from ..wire.parts import HelloResult
from .arguments import SANDBOX_HELP, add_verbose
from .bridge_dirs import BRIDGE_ID, bridge_rows
from .exits import Failure, UsageError
from .output import print_err, print_out
from .sandboxes import open_sandbox

__all__ = ["add_command"]


def add_command(commands: Any) -> None:
    """Add ``stop`` to the ``bridge-client`` sub-commands."""
    stop = commands.add_parser(
        "stop",
        help="stop a bridge cleanly",
        description="Stop a bridge (SIGTERM, after checking it answers as that bridge). A bridge that "
        "is not running is not an error.",
    )
    stop.add_argument("bridge_id", nargs="?", metavar="BRIDGE_ID", help="an id from `bridge-client bridges`")
    stop.add_argument("--all", action="store_true", help="stop every running bridge of the sandbox")
    stop.add_argument("--sandbox", metavar="DIR", help=SANDBOX_HELP)
    stop.add_argument(
        "--timeout", type=float, default=10.0, help="seconds to wait for each to exit (default: %(default)g)"
    )
    add_verbose(stop)
    stop.set_defaults(func=_cmd_stop)


class _NotRunning(Exception):
    """The bridge to stop is not running (nothing to do: exit status 0)."""


def _check_it_is_that_bridge(sandbox: Sandbox, info: identity.ListeningInfo, bridge_id: str) -> None:
    """Before a signal goes to a pid: the bridge must answer ``Hello`` with that bridge id and
    that pid (a stale listening file may name a pid the system gave to another process)."""
    from ..client.connection import Connection  # the host side: loaded when a bridge is stopped

    token = hmac_token(default_secret())(sandbox.id)
    try:
        conn = Connection(sandbox.expose(info.port), token, open_timeout=5.0)
    except Unauthorized:
        raise Failure(
            f"bridge {bridge_id} refuses this user's token: it was launched with another secret; "
            f"set {SECRET_ENV} to the secret it was launched with (or run this as the user who did)"
        ) from None
    except ConnectionLost:
        raise _NotRunning(f"bridge {bridge_id} is not running (its listening file is stale)") from None
    try:
        hello = HelloResult.from_dict(conn.call("Hello", None, timeout=5.0))
    except HarnessError as exc:
        raise Failure(f"port {info.port} does not answer as bridge {bridge_id}: {exc}") from None
    finally:
        conn.close()
    if hello.bridge_id != bridge_id or hello.pid != info.pid:
        raise _NotRunning(f"bridge {bridge_id} is not running (port {info.port} is another program's)")


def _stop_one(sandbox: Sandbox, bridge_id: str, timeout: float) -> str:
    """Stop one bridge (SIGTERM, then wait for its listening file to go); return what to print.

    Raises:
        _NotRunning: it is not running (already stopped, or a stale listening file).
        Failure: no such bridge, another secret, or it did not stop within ``timeout``.
    """
    folder = identity.state_dir(sandbox.state_root, bridge_id)
    listening = posixpath.join(folder, identity.LISTENING_FILE)
    try:
        info = identity.parse_listening(sandbox.read_file(listening))
    except FileNotFoundError:
        try:
            sandbox.read_file(posixpath.join(folder, identity.LAUNCH_FILE))
        except FileNotFoundError:
            raise Failure(
                f"no bridge {bridge_id} in {sandbox.workdir} (see `bridge-client bridges`)"
            ) from None
        except OSError:
            pass
        raise _NotRunning(f"bridge {bridge_id} is not running") from None
    except ValueError as exc:
        raise Failure(f"bridge {bridge_id}: {exc}") from None
    _check_it_is_that_bridge(sandbox, info, bridge_id)
    result = sandbox.exec(["kill", "-TERM", str(info.pid)])
    if not result.ok:
        raise _NotRunning(f"bridge {bridge_id} (pid {info.pid}) is not running")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            sandbox.read_file(listening)
        except FileNotFoundError:
            return f"stopped bridge {bridge_id} (pid {info.pid})"
        time.sleep(0.05)
    raise Failure(f"bridge {bridge_id} (pid {info.pid}) did not stop within {timeout:g} s")


def _cmd_stop(args: argparse.Namespace) -> int:
    if args.all == (args.bridge_id is not None):
        raise UsageError("give one BRIDGE_ID or --all")
    if args.timeout < 0:
        raise UsageError("--timeout must be >= 0")
    if args.bridge_id is not None and not BRIDGE_ID.match(args.bridge_id):
        raise UsageError(
            f"{args.bridge_id!r} is not a bridge id (32 hex characters, from `bridge-client bridges`)"
        )
    sandbox = open_sandbox(args.sandbox, removed_ok=True)
    if args.bridge_id is not None:
        try:
            print_out(_stop_one(sandbox, args.bridge_id, args.timeout))
        except _NotRunning as exc:
            print_out(str(exc))
        return 0
    failed = 0
    rows = [row for row in bridge_rows(sandbox) if row["pid"] is not None]
    for row in rows:
        try:
            print_out(_stop_one(sandbox, row["id"], args.timeout))
        except _NotRunning:
            pass
        except (Failure, HarnessError) as exc:
            print_err(f"bridge-client: error: {exc}")
            failed += 1
    if not rows:
        print_out(f"no running bridges in {sandbox.workdir}")
    return 1 if failed else 0

"""The bridge program: ``python -m bridge_client.bridge --driver NAME_OR_MODULE:CALLABLE``.

Reads its state directory from ``BRIDGE_CLIENT_STATE_DIR``; takes the lock (a second
bridge on the same state directory waits until the first one listens, then exits 0
quietly); reads ``launch.json`` and ``token`` there; makes the driver; opens the store;
listens; writes ``listening.json`` (and, when its launcher gave it a notice pipe in
``BRIDGE_CLIENT_NOTICE_FD``, says so there in one line); serves until SIGTERM/SIGINT or
idle; then removes ``listening.json`` (only if it still names this instance), releases the
lock and exits 0.

Start-up imports only what the lock needs until the lock is held: a bridge that loses the
race costs an interpreter start and little more.

Exit codes: 0 clean exit, or another bridge holds the lock; 1 the store failed or the
server crashed; 2 a launch problem (environment, files, driver, bind), told in one line on
stderr; 3 the state directory cannot be written (a full disk, a quota, a read-only file
system: :mod:`bridge_client.state_dir.unwritable`), at start or later, said also on the
notice pipe (``unwritable <reason>``), since ``bridge.log`` is on that disk too.
"""
from __future__ import annotations

import logging
import sys
import time
from typing import Optional, Sequence

from .arguments import limits, parse
from .launch import DriverRegistry, LaunchError, load_driver, prepare, state_dir
from .locks import release_lock, take_lock, take_start_lock
from .notice import notice_fd, notify, package_version
from .serving import RunningBridge
from ..state_dir.unwritable import NOTICE_WORD, UNWRITABLE_EXIT, is_full, unwritable_reason

__all__ = ["main", "builtin_drivers", "load_driver", "LaunchError"]

log = logging.getLogger("bridge_client.bridge")

SWITCH_INTERVAL = 0.0005
"""Seconds a thread of the bridge holds the GIL while another waits for it (CPython's default
is 0.005). A driver emitting fast keeps the GIL busy, and the thread that takes a reader's Ack
(and sends its next Chunk) would wait up to the default 5 ms for it each time: a backlog's
Chunks then go out at the GIL's pace, not the reader's."""


def _configure_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    formatter = logging.Formatter(
        "%(asctime)s.%(msecs)03dZ %(levelname)s %(name)s [%(threadName)s] %(message)s", "%Y-%m-%dT%H:%M:%S"
    )
    formatter.converter = time.gmtime
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.getLogger("websockets").setLevel(logging.WARNING)


def builtin_drivers() -> DriverRegistry:
    """The built-in drivers (:mod:`bridge_client.drivers`) as the bridge is given them: the
    program is the one place that knows both the bridge and the drivers."""
    from .. import drivers

    def settle(state: str) -> None:
        drivers.STATE_DIR = state  # the CLI drivers find their private installs from it

    return DriverRegistry(drivers.BUILTIN_DRIVERS, settle)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the bridge program.

    Args:
        argv: the arguments (without the program name); ``None`` reads ``sys.argv``.

    Returns:
        The exit code: 0 clean, or another bridge holds the lock; 1 the store or server
        failed; 2 a launch problem.
    """
    args = parse(argv)
    sys.setswitchinterval(SWITCH_INTERVAL)
    _configure_logging()
    notice = notice_fd()
    start: Optional[int] = None
    lock: Optional[int] = None
    try:
        try:
            state = state_dir()
            # The start lock first: a bridge that finds another one starting waits until it
            # listens (or is gone), so that it exits, and tells its launcher, only once the
            # winner's listening file is there.
            start = take_start_lock(state)
            lock = take_lock(state)
            if lock is None:
                log.info("another bridge holds the lock on %s; this one exits", state)
                notify(notice, f"locked {package_version()}")
                notice = None
                return 0
            launch = prepare(state, args.driver, builtin_drivers())
        except LaunchError as exc:
            log.error("%s", exc)
            code, notice = _launch_failed(exc, notice)
            return code

        def listening() -> None:
            nonlocal notice, start
            notify(notice, f"listening {package_version()}")
            notice = None
            if start is not None:
                release_lock(start)
                start = None

        try:
            bridge = RunningBridge(launch, limits(args), lock_fd=lock)
            code = bridge.run(on_listening=listening)
        except LaunchError as exc:
            log.error("%s", exc)
            code, notice = _launch_failed(exc, notice, state)
            return code
        if code == 2 and notice is not None and is_full(state):  # the listening file, say
            code, notice = _launch_failed(None, notice, state)
        elif code == 1:
            reason = unwritable_reason(bridge.store.failure)
            if reason is not None:
                log.error("the state directory %s cannot be written: %s", state, reason)
                code = UNWRITABLE_EXIT
        return code
    finally:
        # The lock before the start lock: a bridge waiting to start then finds the lock free.
        if lock is not None:
            release_lock(lock)
        if start is not None:
            release_lock(start)
        notify(notice, "")  # closed without a line: the launcher reads the exit status


def _launch_failed(
    exc: Optional[BaseException], notice: Optional[int], state: Optional[str] = None
) -> "tuple[int, Optional[int]]":
    """The exit status of a bridge that could not start, and the notice pipe left to close:
    :data:`UNWRITABLE_EXIT` when the state directory cannot be written (said on the notice
    pipe, which is then closed), else 2."""
    reason = unwritable_reason(exc)
    if reason is None and state is not None and is_full(state):
        reason = "the file system has no space left"
    if reason is None:
        return 2, notice
    notify(notice, f"{NOTICE_WORD} {reason}")
    return UNWRITABLE_EXIT, None


if __name__ == "__main__":
    sys.exit(main())

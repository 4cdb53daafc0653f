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
stderr.
"""
from __future__ import annotations

import argparse
import errno
import fcntl
import importlib
import logging
import os
import signal
import socket
import stat
import sys
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any, Callable, Dict, NamedTuple, Optional, Sequence, cast

from ..errors import InvalidToken, ProtocolError, UntrustedFile
from ..private_files import check_folder, check_stat, open_private, read_private
from . import identity

if TYPE_CHECKING:
    from ..redacted import Redacted
    from .driver import Driver

__all__ = ["main", "load_driver", "LaunchError"]

log = logging.getLogger("bridge_client.bridge")

_ENV_PREFIX = "BRIDGE_CLIENT_"
_NOTICE_FD_ENV = "BRIDGE_CLIENT_NOTICE_FD"  # (sandbox.base.NOTICE_FD_ENV, not imported here)
_START_WAIT = 30.0  # seconds a bridge waits for another one's start before trying the lock anyway
_SHUTDOWN_TIMEOUT = 30.0
_LISTENING_CHECK = 1.0  # seconds between checks that listening.json still names this bridge


class LaunchError(Exception):
    """A launch problem: the bridge says it in one line and exits 2."""


class _Launch(NamedTuple):
    state: str
    info: identity.LaunchInfo
    token: "Redacted"
    driver: "Driver"


# ---------------------------------------------------------------------------- startup


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


def _check_state_dir(path: str) -> None:
    """Refuse a state directory that is a symlink, another user's, or writable by others:
    whoever could write it could plant the files we read (the token), or read what we write
    (the store) (C17, C21).

    Raises:
        LaunchError: it is not this user's own folder.
    """
    try:
        check_folder(path)
    except UntrustedFile as exc:
        raise LaunchError(f"refusing the state directory: {exc}") from None
    except OSError as exc:
        raise LaunchError(f"cannot inspect the state directory {path}: {exc.strerror or exc}") from None


def _make_private(path: str, warn: bool = True) -> None:
    """Give an existing regular file of the state directory mode 0600 (a host may have left it
    readable by others; ``warn`` logs that); a missing file is left for the checks that read it.

    Raises:
        LaunchError: it is a symlink (never followed: a planted ``lock`` or ``bridge.log`` link
            would have us truncate or append to its target), not a regular file, owned by
            another user, writable by others (someone else may have written it), or cannot be
            made private.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise LaunchError(f"cannot inspect {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode) and not stat.S_ISLNK(info.st_mode):
        return  # reading (or locking) it fails with a clear error
    try:
        check_stat(info, path)  # readable by others is mended below; writable by others is not
    except UntrustedFile as exc:
        raise LaunchError(f"refusing a file of the state directory: {exc}") from None
    if info.st_mode & 0o077:
        if warn:
            log.warning("%s was readable by others: made it 0600", path)
        try:
            os.chmod(path, 0o600)
        except OSError as exc:
            raise LaunchError(f"cannot chmod 0600 {path}: {exc.strerror or exc}") from None


def _read(path: str, what: str) -> bytes:
    """Read a state file without following a symlink or blocking on a FIFO."""
    try:
        return read_private(path)
    except OSError as exc:
        raise LaunchError(f"cannot read {what} {path}: {exc.strerror or exc}") from None


def load_driver(spec: str, agent_options: Any) -> "Driver":
    """Make the driver named by ``spec``: ``echo``, ``shell``, or ``MODULE:CALLABLE`` (a
    factory called with ``agent_options``).

    Raises:
        LaunchError: unknown name, import error, missing callable, the factory raised, or what
            it returned is not a driver.
    """
    from ..drivers import BUILTIN_DRIVERS

    target = BUILTIN_DRIVERS.get(spec, spec)
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        names = ", ".join(sorted(BUILTIN_DRIVERS))
        raise LaunchError(f"unknown driver {spec!r}: use {names} or MODULE:CALLABLE")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise LaunchError(
            f"cannot import driver module {module_name!r}: {type(exc).__name__}: {exc}"
        ) from None
    for name in attr.split("."):
        try:
            obj = getattr(obj, name)
        except AttributeError:
            raise LaunchError(f"driver module {module_name!r} has no {attr!r}") from None
    if not callable(obj):
        raise LaunchError(f"driver factory {target!r} is not callable")
    try:
        driver = obj(agent_options)
    except Exception as exc:
        raise LaunchError(f"driver {spec!r} refused its options: {type(exc).__name__}: {exc}") from None
    if not isinstance(getattr(driver, "agent_id", None), str) or not callable(
        getattr(driver, "run_turn", None)
    ):
        raise LaunchError(f"driver factory {target!r} did not return a driver (agent_id: str, run_turn())")
    return cast("Driver", driver)


def _state_dir() -> str:
    """Read the state directory from the environment and check it and its files (C21);
    remove every ``BRIDGE_CLIENT_*`` variable from the environment."""
    state = os.environ.get(identity.STATE_DIR_ENV, "")
    # Children (the shell driver's commands) must never see our variables (the token's dir).
    for key in [k for k in os.environ if k.startswith(_ENV_PREFIX)]:
        del os.environ[key]
    if not state:
        raise LaunchError(f"{identity.STATE_DIR_ENV} is not set: it names the bridge's state directory")
    if not os.path.isdir(state):
        raise LaunchError(f"state directory {state} does not exist")
    _check_state_dir(state)
    try:
        os.chmod(state, 0o700)
    except OSError as exc:
        raise LaunchError(f"cannot chmod 0700 the state directory {state}: {exc.strerror}") from None
    quiet = (identity.LOG_FILE, identity.LOCK_FILE, identity.START_LOCK_FILE)
    for name in (identity.TOKEN_FILE, identity.LAUNCH_FILE, *quiet):
        _make_private(os.path.join(state, name), warn=name not in quiet)
    for suffix in ("", "-wal", "-shm", "-journal"):  # SQLite opens these by name: no symlinks
        _make_private(os.path.join(state, identity.STORE_FILE + suffix), warn=False)
    return state


def _prepare(state: str, driver_spec: str) -> _Launch:
    """Read ``launch.json`` and the token of the state directory, and make the driver."""
    from .. import drivers
    from ..redacted import Redacted, check_token

    launch_path = os.path.join(state, identity.LAUNCH_FILE)
    try:
        info = identity.parse_launch(_read(launch_path, "the launch file"))
    except ProtocolError as exc:
        raise LaunchError(f"bad launch file {launch_path}: {exc}") from None
    token_path = os.path.join(state, identity.TOKEN_FILE)
    raw = _read(token_path, "the token file")
    try:
        text = raw.decode("utf-8").rstrip()
    except UnicodeDecodeError:
        raise LaunchError(f"the token file {token_path} is not UTF-8") from None
    if not text:
        raise LaunchError(f"the token file {token_path} is empty")
    try:
        token = check_token(Redacted(text), f"the token in {token_path}")
    except InvalidToken as exc:
        raise LaunchError(str(exc)) from None
    drivers.STATE_DIR = state  # the CLI drivers find their private installs from it
    driver = load_driver(driver_spec, info.agent_options)
    if driver.agent_id != info.agent_id:
        raise LaunchError(
            f"driver agent id {driver.agent_id!r} differs from launch.json agentId {info.agent_id!r}"
        )
    return _Launch(state, info, token, driver)


def _notice_fd() -> Optional[int]:
    """The notice pipe the launcher gave (``BRIDGE_CLIENT_NOTICE_FD``), kept from children."""
    text = os.environ.get(_NOTICE_FD_ENV, "")
    try:
        fd = int(text)
        os.fstat(fd)
    except (ValueError, OSError):
        return None
    if fd <= 2:
        return None  # never our own stdin, stdout or stderr
    try:
        os.set_inheritable(fd, False)
    except OSError:
        return None
    return fd


def _notify(fd: Optional[int], line: str) -> None:
    """Write ``line`` to the notice pipe and close it (the launcher may be gone: no matter)."""
    if fd is None:
        return
    try:
        if line:
            os.write(fd, (line + "\n").encode("utf-8"))
    except OSError:
        pass
    finally:
        try:
            os.close(fd)
        except OSError:
            pass


def _package_version() -> str:
    """This package's version, for the notice: the launcher trusts the bridge program it
    launched without a template check only when it is the host's own version."""
    from .. import __version__

    return __version__


class _StartWaitOver(Exception):
    """The wait for another bridge's start ran out."""


def _raise_start_wait_over(signum: int, frame: Any) -> None:
    raise _StartWaitOver()


def _take_start_lock(state: str) -> Optional[int]:
    """Take the state directory's start lock, waiting (at most ``_START_WAIT`` seconds) while
    another bridge is starting; ``None`` when the wait ran out. The wait blocks in the kernel:
    a bridge that loses the race sleeps until the winner listens."""
    path = os.path.join(state, identity.START_LOCK_FILE)
    try:
        fd = open_private(path, os.O_RDWR | os.O_CREAT, 0o600)
    except UntrustedFile as exc:
        raise LaunchError(f"refusing the start lock file: {exc}") from None
    except OSError as exc:
        raise LaunchError(f"cannot open the start lock file {path}: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd
    except OSError as exc:
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            os.close(fd)
            raise LaunchError(f"cannot lock {path}: {exc.strerror}") from None
    if threading.current_thread() is not threading.main_thread():  # no alarm outside it
        deadline = time.monotonic() + _START_WAIT
        while time.monotonic() < deadline:
            time.sleep(0.01)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except OSError:
                continue
        os.close(fd)
        return None
    previous = signal.signal(signal.SIGALRM, _raise_start_wait_over)
    signal.setitimer(signal.ITIMER_REAL, _START_WAIT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd
    except (_StartWaitOver, OSError):
        os.close(fd)
        return None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _take_lock(state: str) -> Optional[int]:
    """B02: take the state directory's lock; ``None`` when another bridge holds it."""
    path = os.path.join(state, identity.LOCK_FILE)
    try:
        # No-follow: a planted symlink would have us truncate its target below.
        fd = open_private(path, os.O_RDWR | os.O_CREAT, 0o600)  # not inherited by children (PEP 446)
    except UntrustedFile as exc:
        raise LaunchError(f"refusing the lock file: {exc}") from None
    except OSError as exc:
        raise LaunchError(f"cannot open the lock file {path}: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return None
        raise LaunchError(f"cannot lock {path}: {exc.strerror}") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def _release_lock(fd: int) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------- running


class _Bridge:
    """The running bridge: its parts, and the way it stops (once, from any thread)."""

    def __init__(self, launch: _Launch, limits: Optional[Dict[str, Any]] = None) -> None:
        # Imported here so that ``load_driver`` and the startup checks work without websockets,
        # and a bridge that loses the lock exits without importing them.
        import sqlite3

        from ..wire.parts import PROTOCOL_VERSION, HelloResult
        from .recovery import open_store
        from .server import BridgeServer, IdleWatcher, default_limits
        from .store import StoreError
        from .turns import TurnManager, iso_now

        self.launch = launch
        self.instance = uuid.uuid4().hex
        self.started_at = iso_now()
        self.code = 0
        self._stop_lock = threading.Lock()
        self._stopping = False
        self._stopped = threading.Event()
        info = launch.info
        store_path = os.path.join(launch.state, identity.STORE_FILE)
        limits = dict(limits or {})
        bounds = default_limits()  # B09: from the open-files and task limits
        cancel_grace = limits.pop("cancel_grace", None)
        max_turns = limits.pop("max_turns", None) or bounds.turns
        synchronous = limits.pop("synchronous", None) or "FULL"
        limits.setdefault("max_connections", bounds.connections)
        limits.setdefault("max_streams", bounds.streams)
        try:
            # A damaged store is moved aside and a fresh one started (B10); named in the log.
            self.store = open_store(store_path, on_fatal=self._store_failed, synchronous=synchronous).store
        except (sqlite3.Error, OSError, StoreError) as exc:  # StoreError: a newer schema
            raise LaunchError(f"cannot open the store {store_path}: {exc}") from None
        log.info("store %s: generation %s, synchronous=%s", store_path, self.store.generation, synchronous)
        self.idle = IdleWatcher(info.idle_timeout, lambda: self.stop("idle"))
        turn_options: Dict[str, Any] = {} if cancel_grace is None else {"cancel_grace": cancel_grace}
        self.manager = TurnManager(
            self.store,
            launch.driver,
            agent_id=info.agent_id,
            bridge_id=info.bridge_id,
            on_running=self.idle.set_running,
            generation=self.store.generation,
            max_running=max_turns,
            **turn_options,
        )
        hello = HelloResult(
            info.agent_id,
            info.bridge_id,
            self.instance,
            PROTOCOL_VERSION,
            os.getpid(),
            self.started_at,
            self.store.generation,
        )
        self.server = BridgeServer(
            self.manager,
            token=launch.token,
            hello=hello.to_dict(),
            bind=info.bind,
            idle=self.idle,
            **limits,  # max_connections, max_handshakes, handshake_timeout (B08), B09 bounds
        )
        self.listening_path = os.path.join(launch.state, identity.LISTENING_FILE)

    def _store_failed(self, exc: BaseException) -> None:
        self.stop(f"the store failed ({type(exc).__name__})", code=1)

    def stop(self, reason: str, code: int = 0) -> None:
        """Shut down cleanly, once: in a thread of its own, because the server's shutdown
        waits for the connection threads and for serve_forever to return."""
        with self._stop_lock:
            if self._stopping:
                return
            self._stopping = True
            self.code = code
        log.info("shutting down: %s", reason)
        threading.Thread(target=self._shutdown, name="bridge-shutdown", daemon=True).start()

    def _shutdown(self) -> None:
        try:
            self.idle.stop()
            # Connections first: their hosts see a drop and resend to the next bridge (C08),
            # rather than getting answers from a bridge that is going away.
            self.server.shutdown()
            self.manager.close()  # running turns write nothing more; they stay unfinished (B05)
        except Exception:
            log.exception("shutdown failed")
        finally:
            self._stopped.set()

    def run(self, on_listening: Callable[[], None] = lambda: None) -> int:
        """Listen, announce (the listening file, then ``on_listening()``), serve until
        stopped, clean up. Returns the exit code."""
        from ..wire.parts import PROTOCOL_VERSION

        try:
            port = self.server.start()
        except OSError as exc:
            self.store.close()
            raise LaunchError(f"cannot listen on {self.launch.info.bind}: {exc.strerror or exc}") from None
        signals = _SignalWatcher(self.stop)  # before the file: a SIGTERM from now on is clean
        info = self.launch.info
        listening = identity.ListeningInfo(
            PROTOCOL_VERSION,
            info.agent_id,
            info.bridge_id,
            info.bind,
            port,
            os.getpid(),
            self.instance,
            self.started_at,
        )
        try:
            identity.secure_write(self.listening_path, listening.to_json().encode("utf-8"))
        except OSError as exc:
            log.error("cannot write %s: %s", self.listening_path, exc.strerror or exc)
            self.stop("no listening file", code=2)
        else:
            log.info(
                "bridge %s (agent %s, instance %s) listening on %s:%d",
                info.bridge_id,
                info.agent_id,
                self.instance,
                info.bind,
                port,
            )
            self.idle.start()
            on_listening()
        keeper = threading.Thread(
            target=self._keep_listening, args=(listening,), name="bridge-listening", daemon=True
        )
        keeper.start()
        try:
            self.server.serve_forever()
            if not self._stopping:
                # websockets' accept loop ends on an OSError (EMFILE, say): a bridge that no
                # longer accepts must not keep the lock and the listening file.
                log.error("the server stopped accepting connections")
                self.stop("the server stopped accepting connections", code=1)
        except Exception:
            log.exception("the server failed")
            self.stop("the server failed", code=1)
        finally:
            self._stopped.wait(_SHUTDOWN_TIMEOUT)
            keeper.join(timeout=2 * _LISTENING_CHECK)  # it must not write the file again after this
            signals.close()
            self.store.close()
            self._remove_listening()
        log.info("bridge stopped")
        return self.code

    def _keep_listening(self, listening: identity.ListeningInfo) -> None:
        """Rewrite listening.json when it no longer names this instance (removed, damaged):
        hosts find the bridge only through it, and the lock keeps any other bridge from
        writing it (C04, C05)."""
        expected = listening.to_json().encode("utf-8")
        while not self._stopped.wait(_LISTENING_CHECK):
            if self._stopping:
                return
            try:
                # Never blocks: a FIFO put in its place is refused, then replaced below.
                if identity.optional_read(self.listening_path) == expected:
                    continue
            except OSError as exc:  # UntrustedFile included
                log.warning("listening file is unusable (%s)", exc)
            log.warning("listening file was changed or removed; writing it again")
            try:
                identity.secure_write(self.listening_path, expected)
            except OSError as exc:
                log.error("cannot write %s: %s", self.listening_path, exc.strerror or exc)

    def _remove_listening(self) -> None:
        """B01: remove listening.json, only when it still names this instance."""
        try:
            data = identity.optional_read(self.listening_path)
        except OSError:  # not a regular file of ours (UntrustedFile): not ours to remove
            return
        if data is None:
            return
        try:
            named = identity.parse_listening(data).instance
        except ProtocolError:
            return
        if named == self.instance:
            try:
                os.unlink(self.listening_path)
            except FileNotFoundError:
                pass


class _SignalWatcher:
    """Turns SIGTERM/SIGINT into ``stop(name)`` from a thread of its own.

    The signals only write a byte to a socket (``signal.set_wakeup_fd``); a thread reads it.
    So no lock is ever taken inside a signal handler (it could be held by the interrupted
    main thread). Create it in the main thread.
    """

    _SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, stop: Any) -> None:
        self._stop = stop
        self._rsock, self._wsock = socket.socketpair()
        self._wsock.setblocking(False)
        self._old_fd = signal.set_wakeup_fd(self._wsock.fileno(), warn_on_full_buffer=False)
        for sig in self._SIGNALS:
            signal.signal(sig, lambda signum, frame: None)  # the wakeup fd carries it
        self._thread = threading.Thread(target=self._run, name="bridge-signals", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                data = self._rsock.recv(64)
            except OSError:
                return
            if not data:
                return
            for number in data:
                if number in (int(s) for s in self._SIGNALS):
                    self._stop(signal.Signals(number).name)

    def close(self) -> None:
        """Restore the default handlers and stop the thread."""
        signal.set_wakeup_fd(self._old_fd)
        for sig in self._SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        self._wsock.close()
        self._rsock.close()


# ---------------------------------------------------------------------------- main


def _parse(argv: Optional[Sequence[str]]) -> argparse.Namespace:
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


def _limits(args: argparse.Namespace) -> Dict[str, Any]:
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


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the bridge program.

    Args:
        argv: the arguments (without the program name); ``None`` reads ``sys.argv``.

    Returns:
        The exit code: 0 clean, or another bridge holds the lock; 1 the store or server
        failed; 2 a launch problem.
    """
    args = _parse(argv)
    _configure_logging()
    notice = _notice_fd()
    start: Optional[int] = None
    lock: Optional[int] = None
    try:
        try:
            state = _state_dir()
            # The start lock first: a bridge that finds another one starting waits until it
            # listens (or is gone), so that it exits, and tells its launcher, only once the
            # winner's listening file is there.
            start = _take_start_lock(state)
            lock = _take_lock(state)
            if lock is None:
                log.info("another bridge holds the lock on %s; this one exits (C05)", state)
                _notify(notice, f"locked {_package_version()}")
                notice = None
                return 0
            launch = _prepare(state, args.driver)
        except LaunchError as exc:
            log.error("%s", exc)
            return 2

        def listening() -> None:
            nonlocal notice, start
            _notify(notice, f"listening {_package_version()}")
            notice = None
            if start is not None:
                _release_lock(start)
                start = None

        try:
            return _Bridge(launch, _limits(args)).run(on_listening=listening)
        except LaunchError as exc:
            log.error("%s", exc)
            return 2
    finally:
        # The lock before the start lock: a bridge waiting to start then finds the lock free.
        if lock is not None:
            _release_lock(lock)
        if start is not None:
            _release_lock(start)
        _notify(notice, "")  # closed without a line: the launcher reads the exit status

if __name__ == "__main__":
    sys.exit(main())

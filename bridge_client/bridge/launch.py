"""The bridge program's start-up checks: the state directory named by
``BRIDGE_CLIENT_STATE_DIR`` and its files (this user's own, mode 0600, no symlinks), the launch
file and the token in it, and the driver the launch names, made from the
:class:`DriverRegistry` the bridge program hands over (the bridge imports no driver itself).

Each failure is a :class:`LaunchError`: the bridge says it in one line and exits 2.
"""
from __future__ import annotations

import importlib
import logging
import os
import stat
from typing import TYPE_CHECKING, Any, Callable, Mapping, NamedTuple, cast

from ..errors import InvalidToken, ProtocolError, UntrustedFile
from ..private_files import check_folder, check_stat, read_private
from ..state_dir import identity

if TYPE_CHECKING:
    from ..redacted import Redacted
    from .driver import Driver

__all__ = ["DriverRegistry", "Launch", "LaunchError", "load_driver", "prepare", "state_dir"]

log = logging.getLogger("bridge_client.bridge")  # one logger for all the bridge program's modules

_ENV_PREFIX = "BRIDGE_CLIENT_"


class LaunchError(Exception):
    """A launch problem: the bridge says it in one line and exits 2."""


class DriverRegistry(NamedTuple):
    """The drivers a bridge can make, as the bridge program hands them to :func:`prepare`.

    Attributes:
        builtins: a built-in driver's name (``echo``) to its factory, as ``MODULE:CALLABLE``.
        settle: called with the state directory before the driver is made (a driver that
            keeps files of its own, such as a private install of its CLI, finds them from it).
    """

    builtins: Mapping[str, str]
    settle: Callable[[str], None]


class Launch(NamedTuple):
    """What the bridge starts from: its state directory, the launch file, the token, the driver."""

    state: str
    info: identity.LaunchInfo
    token: "Redacted"
    driver: "Driver"


def _check_state_dir(path: str) -> None:
    """Refuse a state directory that is a symlink, another user's, or writable by others:
    whoever could write it could plant the files we read (the token), or read what we write
    (the store).

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


def load_driver(spec: str, agent_options: Any, registry: DriverRegistry) -> "Driver":
    """Make the driver named by ``spec``: a name of ``registry.builtins`` (``echo``,
    ``shell``), or ``MODULE:CALLABLE`` (a factory called with ``agent_options``).

    Raises:
        LaunchError: unknown name, import error, missing callable, the factory raised, or what
            it returned is not a driver.
    """
    target = registry.builtins.get(spec, spec)
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        names = ", ".join(sorted(registry.builtins))
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


def state_dir() -> str:
    """Read the state directory from the environment and check it and its files;
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


def prepare(state: str, driver_spec: str, registry: DriverRegistry) -> Launch:
    """Read ``launch.json`` and the token of the state directory, and make the driver named
    by ``driver_spec`` from ``registry`` (see :func:`load_driver`).

    Raises:
        LaunchError: a file is missing, unreadable or malformed, the token is not one, or the
            driver cannot be made or has another agent id than the launch file names.
    """
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
    registry.settle(state)
    driver = load_driver(driver_spec, info.agent_options, registry)
    if driver.agent_id != info.agent_id:
        raise LaunchError(
            f"driver agent id {driver.agent_id!r} differs from launch.json agentId {info.agent_id!r}"
        )
    return Launch(state, info, token, driver)

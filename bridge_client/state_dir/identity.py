"""Who a bridge is and where it lives: the bridge id, the state directory, and the
files in it (:doc:`protocol`, "Writing a bridge: the state directory").

Both sides import it: the host to compute the id and read the listening and launch files
(pure functions), the bridge to check and write them. Writing files is done by
:func:`secure_write`, used by the bridge and by sandboxes that work on local folders.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import posixpath
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, List, Mapping, Optional, Sequence

from ..errors import ProtocolError
from ..private_files import check_folder, read_private, write_whole

if TYPE_CHECKING:
    from ..redacted import Redacted

__all__ = [
    "BRIDGE_ID_LENGTH",
    "STATE_DIR_ENV",
    "LISTENING_FILE",
    "LAUNCH_FILE",
    "TOKEN_FILE",
    "LOCK_FILE",
    "STORE_FILE",
    "LOG_FILE",
    "START_LOCK_FILE",
    "canonical_json",
    "bridge_id",
    "state_dir",
    "ListeningInfo",
    "LaunchInfo",
    "parse_listening",
    "parse_launch",
    "secure_write",
    "make_private_dirs",
    "optional_read",
]

BRIDGE_ID_LENGTH = 32
"""Hex characters in a bridge id (128 bits)."""

STATE_DIR_ENV = "BRIDGE_CLIENT_STATE_DIR"
"""The environment variable in which the bridge program finds its state directory."""

LISTENING_FILE = "listening.json"
LAUNCH_FILE = "launch.json"
TOKEN_FILE = "token"
LOCK_FILE = "lock"
STORE_FILE = "bridge.sqlite3"
LOG_FILE = "bridge.log"
START_LOCK_FILE = "start.lock"
"""Held by a bridge from before it takes ``lock`` until it listens: a bridge that loses the
race waits on it, so it exits (and tells its launcher) once the winner's listening file is
there."""


def _protocol_version() -> int:
    # Imported when first needed: the bridge takes its lock (and a loser exits) without the wire.
    from ..wire.parts import PROTOCOL_VERSION

    return PROTOCOL_VERSION


def canonical_json(value: Any) -> str:
    """Serialize ``value`` as canonical JSON: sorted keys, no spaces, UTF-8 kept as is.

    Raises:
        TypeError: ``value`` holds something JSON cannot carry.
        ValueError: a float in it is NaN or infinite.
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def bridge_id(
    agent_id: str,
    command: str,
    args: Sequence[str],
    agent_options: Any,
    token: Redacted,
) -> str:
    """Compute the bridge id: HMAC-SHA256, keyed by the token, of the canonical JSON of
    ``{"id", "command", "args", "agentOptions"}``, as 32 hex characters.

    Hosts that launch a bridge alike (same options, same sandbox token) get the same id and
    share one bridge; any other option gives another id. Keying with the token mixes it in
    without revealing anything about it.

    Args:
        agent_id: the agent id the bridge must answer with.
        command: the program that runs the bridge; args: its arguments.
        agent_options: plain JSON handed to the driver.
        token: the sandbox's token.

    Raises:
        TypeError: ``agent_options`` is not plain JSON.
    """
    try:
        text = canonical_json(
            {"id": agent_id, "command": command, "args": list(args), "agentOptions": agent_options}
        )
    except (TypeError, ValueError) as exc:
        raise TypeError(f"agent_options must be plain JSON: {exc}") from None
    digest = hmac.new(token.reveal().encode(), text.encode(), hashlib.sha256).hexdigest()
    return digest[:BRIDGE_ID_LENGTH]


def state_dir(state_root: str, bridge: str) -> str:
    """Return the bridge's state directory: ``<state_root>/bridges/<bridge id>`` (POSIX path)."""
    return posixpath.join(state_root, "bridges", bridge)


def _check_str(d: Mapping[str, Any], key: str, where: str) -> str:
    value = d.get(key)
    if not isinstance(value, str) or not value:
        raise ProtocolError(f"{where}: {key} must be a non-empty string")
    return value


def _check_int(d: Mapping[str, Any], key: str, where: str, low: int, high: int) -> int:
    value = d.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ProtocolError(f"{where}: {key} must be an integer from {low} to {high}")
    return value


def _load_object(data: bytes, where: str) -> Mapping[str, Any]:
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ProtocolError(f"{where} is not JSON (truncated or corrupt)") from None
    if not isinstance(value, dict):
        raise ProtocolError(f"{where} must hold a JSON object")
    return value


@dataclass(frozen=True)
class ListeningInfo:
    """The content of ``listening.json``: where a running bridge listens.

    Attributes:
        protocol: protocol version; agent_id, bridge_id: who listens; host, port: where
        (``host`` is the bind address inside the sandbox); pid: the bridge's process id;
        instance: new at every start; started_at: ISO 8601 UTC.
    """

    protocol: int
    agent_id: str
    bridge_id: str
    host: str
    port: int
    pid: int
    instance: str
    started_at: str

    def to_json(self) -> str:
        """Return the file's JSON text."""
        return canonical_json(
            {
                "protocol": self.protocol,
                "agentId": self.agent_id,
                "bridgeId": self.bridge_id,
                "host": self.host,
                "port": self.port,
                "pid": self.pid,
                "instance": self.instance,
                "startedAt": self.started_at,
            }
        )


def parse_listening(data: bytes) -> ListeningInfo:
    """Parse ``listening.json``.

    Raises:
        ProtocolError: not JSON, a field missing or mistyped, or another protocol version.
    """
    where = LISTENING_FILE
    d = _load_object(data, where)
    protocol = _check_int(d, "protocol", where, 0, 2**31)
    if protocol != _protocol_version():
        raise ProtocolError(f"{where}: protocol {protocol}, this client speaks {_protocol_version()}")
    return ListeningInfo(
        protocol=protocol,
        agent_id=_check_str(d, "agentId", where),
        bridge_id=_check_str(d, "bridgeId", where),
        host=_check_str(d, "host", where),
        port=_check_int(d, "port", where, 1, 65535),
        pid=_check_int(d, "pid", where, 1, 2**31),
        instance=_check_str(d, "instance", where),
        started_at=_check_str(d, "startedAt", where),
    )


@dataclass(frozen=True)
class LaunchInfo:
    """The content of ``launch.json``: what the host asks the bridge to be.

    Attributes:
        agent_id: the id the driver must have; bridge_id: the bridge's id;
        agent_options: JSON for the driver factory; idle_timeout: seconds with no connection
        and no running turn before the bridge exits; bind: the address to listen on.
    """

    agent_id: str
    bridge_id: str
    agent_options: Any
    idle_timeout: float
    bind: str = "127.0.0.1"
    protocol: int = field(default_factory=_protocol_version)

    def to_json(self) -> str:
        """Return the file's JSON text."""
        return canonical_json(
            {
                "protocol": self.protocol,
                "agentId": self.agent_id,
                "bridgeId": self.bridge_id,
                "agentOptions": self.agent_options,
                "idleTimeout": self.idle_timeout,
                "bind": self.bind,
            }
        )


def parse_launch(data: bytes) -> LaunchInfo:
    """Parse ``launch.json``.

    Raises:
        ProtocolError: not JSON, a field missing or mistyped, or another protocol version.
    """
    where = LAUNCH_FILE
    d = _load_object(data, where)
    protocol = _check_int(d, "protocol", where, 0, 2**31)
    if protocol != _protocol_version():
        raise ProtocolError(f"{where}: protocol {protocol}, this bridge speaks {_protocol_version()}")
    idle = d.get("idleTimeout")
    if not isinstance(idle, (int, float)) or isinstance(idle, bool) or not (0 < idle < float("inf")):
        raise ProtocolError(f"{where}: idleTimeout must be a number of seconds > 0")
    bind = d.get("bind", "127.0.0.1")
    if not isinstance(bind, str) or not bind:
        raise ProtocolError(f"{where}: bind must be a non-empty string")
    return LaunchInfo(
        agent_id=_check_str(d, "agentId", where),
        bridge_id=_check_str(d, "bridgeId", where),
        agent_options=d.get("agentOptions"),
        idle_timeout=float(idle),
        bind=bind,
        protocol=protocol,
    )


def make_private_dirs(folder: str, root: Optional[str] = None) -> None:
    """Create ``folder`` and every missing parent with mode 0700 (``os.makedirs`` would give
    the parents the umask's mode), then check the folders that were already there: from
    ``root`` (an ancestor of ``folder``, e.g. the user's bridge_client home) down to
    ``folder``, or ``folder`` alone without ``root``, each must be a real folder (not a
    symlink) owned by this user and writable by nobody else.

    Raises:
        UntrustedFile: a folder of that chain is a symlink, another user's, or writable by
            others (see :func:`bridge_client.private_files.check_stat`).
        OSError: a folder cannot be created.
    """
    missing = []
    current = os.path.abspath(folder)
    while not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for path in reversed(missing):
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            if not os.path.isdir(path):
                raise
        else:
            os.chmod(path, 0o700)  # mkdir's mode is filtered by the umask
    for path in _chain(os.path.abspath(folder), root):
        check_folder(path)


def _chain(folder: str, root: Optional[str]) -> List[str]:
    """``folder`` and its parents up to ``root`` (inclusive) when ``root`` is an ancestor."""
    if root is None:
        return [folder]
    top = os.path.abspath(root)
    if os.path.commonpath([top, folder]) != top:
        return [folder]
    chain = [folder]
    while chain[-1] != top:
        chain.append(os.path.dirname(chain[-1]))
    return chain


def secure_write(path: str, data: bytes, mode: int = 0o600, root: Optional[str] = None) -> None:
    """Write ``data`` to ``path`` atomically with ``mode``: a temporary file in the same
    folder, fsync, then rename over the target. Readers see the old file or the new one,
    never half of one. Parent folders are created with mode 0700 and checked as
    :func:`make_private_dirs` does (from ``root``). The rename replaces a symlink at ``path``
    rather than writing through it.

    Raises:
        UntrustedFile: the folder (or one up to ``root``) is not this user's own.
        OSError: the folder cannot be created or written.
    """
    folder = os.path.dirname(path) or "."
    make_private_dirs(folder, root)
    write_whole(path, data, mode)


def optional_read(path: str) -> Optional[bytes]:
    """Return the bytes of a local state file, or ``None`` when it does not exist.

    The file is opened without following a symlink and without blocking (a FIFO never holds
    the caller), and must be a regular file of this user that nobody else may write.

    Raises:
        UntrustedFile: it is a symlink, not a regular file, or not this user's own.
        OSError: it cannot be read.
    """
    try:
        return read_private(path, private=False)
    except FileNotFoundError:
        return None

"""The Sandbox protocol: what the host needs of a place where an agent works.

A sandbox runs commands, spawns detached processes, reads and writes files, and exposes a
port as a URL the host can reach. Paths are POSIX paths inside the sandbox. Each adapter
(a local folder, a container, a cloud sandbox) is a small class with these methods.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence, Tuple

try:  # Protocol is in typing from 3.8; runtime_checkable keeps isinstance() usable.
    from typing import Protocol, runtime_checkable
except ImportError:  # pragma: no cover
    from typing_extensions import Protocol, runtime_checkable  # type: ignore[assignment]

__all__ = ["Sandbox", "ExecResult", "Endpoint", "SpawnedProcess", "NoticeProcess", "NOTICE_FD_ENV"]

NOTICE_FD_ENV = "BRIDGE_CLIENT_NOTICE_FD"
"""The environment variable that names, to a process spawned by a sandbox whose
``spawn_notice`` is true, the file descriptor on which it writes one line when it is ready
(the bridge: when it listens)."""


@dataclass(frozen=True)
class ExecResult:
    """What a command run with :meth:`Sandbox.exec` gave.

    Attributes:
        exit_code: the process's exit status (negative: killed by that signal).
        stdout: what it printed on standard output, in bytes.
        stderr: what it printed on standard error, in bytes.
    """

    exit_code: int
    stdout: bytes = b""
    stderr: bytes = b""

    @property
    def ok(self) -> bool:
        """True when ``exit_code`` is 0."""
        return self.exit_code == 0


_NOT_IN_TOKEN = frozenset('()<>@,;:\\"/[]?={} \t')


@dataclass(frozen=True)
class Endpoint:
    """Where the host reaches an exposed port.

    Attributes:
        url: a ``ws://`` or ``wss://`` URL (its path is used for the upgrade).
        headers: extra HTTP headers the sandbox provider's endpoint needs, as (name, value)
            pairs; the bridge's ``Authorization`` header is added by the host.

    Raises:
        ValueError: the URL is not ``ws://`` or ``wss://``, or a header name is not an HTTP
            token, or a header value holds a line break or NUL (header injection).
    """

    url: str
    headers: Tuple[Tuple[str, str], ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url.lower().startswith(("ws://", "wss://")):
            raise ValueError(f"Endpoint.url must be a ws:// or wss:// URL, got {self.url!r}"[:200])
        pairs = tuple(tuple(pair) for pair in self.headers)
        for pair in pairs:
            if len(pair) != 2 or not all(isinstance(x, str) for x in pair):
                raise ValueError("Endpoint.headers must be (name, value) pairs of strings")
            name, value = pair
            if not name or any(c in _NOT_IN_TOKEN or not 32 < ord(c) < 127 for c in name):
                raise ValueError(f"Endpoint header name {name!r} is not an HTTP token")
            if any(c in "\r\n\0" for c in value):
                raise ValueError(f"Endpoint header {name} has a line break or NUL in its value")
        object.__setattr__(self, "headers", pairs)

    def __repr__(self) -> str:
        # Provider headers may hold credentials: show only their names.
        names = ", ".join(name for name, _ in self.headers)
        return f"Endpoint(url={self.url!r}, headers=[{names}])"


@runtime_checkable
class SpawnedProcess(Protocol):
    """A handle on a process started with :meth:`Sandbox.spawn`."""

    @property
    def pid(self) -> Optional[int]:
        """The process id inside the sandbox, when the adapter knows it."""

    def poll(self) -> Optional[int]:
        """Return the exit status if the process has ended and the adapter can tell, else ``None``."""


@runtime_checkable
class NoticeProcess(SpawnedProcess, Protocol):
    """A spawned process that can tell its launcher, in one line, that it is ready.

    Returned by ``spawn`` of an adapter that can hand the process a pipe and says so with a
    true class attribute ``spawn_notice`` (a ``LocalSandbox`` does): :data:`NOTICE_FD_ENV`
    names the pipe's end in the process's environment. The launcher then learns the moment
    a bridge listens instead of polling for its listening file (which it still reads and
    checks), and may leave the bridge program's template check to the bridge's own word.
    Adapters without it (their spawn has no output the host can read) are polled.
    """

    def wait_notice(self, timeout: float) -> Optional[str]:
        """Wait up to ``timeout`` seconds for the process's line.

        Returns:
            The line (without its newline); ``""`` when the process closed its end without
            one (it exited, say); ``None`` when ``timeout`` passed first. Once a line or
            ``""`` was returned, later calls return ``None`` at once.
        """


@runtime_checkable
class Sandbox(Protocol):
    """An isolated place where the agent works (see :doc:`concepts`, "Host and sandbox").

    Attributes:
        id: the sandbox id: stable for the same sandbox, used to derive the token.
        state_root: a folder inside the sandbox, outside the user's workspace, where bridges
            keep their state directories (``<state_root>/bridges/<bridge id>``).
        workdir: the folder inside the sandbox where the agent works.
    """

    @property
    def id(self) -> str:
        """The sandbox id."""

    @property
    def state_root(self) -> str:
        """The folder for bridge state directories (POSIX path inside the sandbox)."""

    @property
    def workdir(self) -> str:
        """The agent's working folder (POSIX path inside the sandbox)."""

    def exec(
        self,
        argv: Sequence[str],
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
    ) -> ExecResult:
        """Run a command to completion.

        Args:
            argv: the program and its arguments.
            cwd: working folder (default: ``workdir``).
            env: variables added to the sandbox's environment.
            timeout: seconds before the command is killed; ``None`` waits for ever.

        Raises:
            SandboxGone: the sandbox cannot run commands any more.
            TimeoutError: the command ran longer than ``timeout``.
        """

    def spawn(
        self,
        argv: Sequence[str],
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        log_path: Optional[str] = None,
    ) -> SpawnedProcess:
        """Start a process detached from the host: it outlives the host process.

        Args:
            argv: the program and its arguments.
            cwd: working folder (default: ``workdir``).
            env: variables added to the sandbox's environment.
            log_path: a file inside the sandbox to append its stdout and stderr to.

        Raises:
            SandboxGone: the sandbox cannot run commands any more.
            FileNotFoundError: the program does not exist.
        """

    def read_file(self, path: str) -> bytes:
        """Return a file's bytes.

        Raises:
            FileNotFoundError: no such file.
            SandboxGone: the sandbox is gone.
        """

    def write_file(self, path: str, data: bytes, *, mode: int = 0o600) -> None:
        """Write a file atomically with ``mode``, creating its folders (mode 0700).

        Raises:
            SandboxGone: the sandbox is gone.
            OSError: the file cannot be written.
        """

    def expose(self, port: int) -> Endpoint:
        """Return the URL at which the host reaches ``port`` inside the sandbox.

        Raises:
            SandboxGone: the sandbox is gone.
        """

"""LocalSandbox: a folder on this machine, the embedded default sandbox."""
from __future__ import annotations

import errno
import hashlib
import os
import select
import stat
import signal
import subprocess
import threading
from typing import Dict, List, Mapping, Optional, Sequence

from ..state_dir.identity import make_private_dirs, secure_write
from ..errors import SandboxGone
from ..paths import user_home
from ..private_files import check_folder, open_private, read_private
from .base import NOTICE_FD_ENV, Endpoint, ExecResult

__all__ = ["LocalSandbox", "LocalProcess", "FOLDER_RECORD"]

FOLDER_RECORD = "folder"
"""The file of a local sandbox's state root that names its folder (the path's bytes), written
with the first file of a bridge there: the sandbox id is a digest of the folder, so without it
a dead bridge's folder could not be told."""

_SCRUBBED_PREFIX = "BRIDGE_CLIENT_"


def _child_env(extra: Optional[Mapping[str, str]]) -> Dict[str, str]:
    # Host secrets (BRIDGE_CLIENT_SECRET and friends) never reach sandbox processes.
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUBBED_PREFIX)}
    if extra:
        env.update(extra)
    return env


def _kill_group(proc: "subprocess.Popen[bytes]") -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.communicate()


_spawned: "set[LocalProcess]" = set()
_spawned_lock = threading.Lock()


def _reap() -> None:
    """Collect the exit status of spawned processes that ended (no zombies), and forget them."""
    with _spawned_lock:
        done = [p for p in _spawned if p._popen.poll() is not None]
        _spawned.difference_update(done)


_NOTICE_MAX = 4096  # bytes of a notice line kept at most


class LocalProcess:
    """A process spawned by :meth:`LocalSandbox.spawn` (wraps ``subprocess.Popen``).

    Spawned processes stay referenced until they end, and are reaped whenever this module
    spawns or runs anything, so a bridge that exits is not left a zombie of the host.
    """

    def __init__(self, popen: "subprocess.Popen[bytes]", notice_fd: Optional[int] = None) -> None:
        self._popen = popen
        self._notice_fd = notice_fd
        self._notice = b""
        self._notice_lock = threading.Lock()
        with _spawned_lock:
            _spawned.add(self)

    def wait_notice(self, timeout: float) -> Optional[str]:
        """Wait up to ``timeout`` seconds for the line the process writes when it is ready.

        Returns:
            The line (without its newline, decoded as UTF-8); ``""`` when the process closed
            its end without a line (it exited); ``None`` when ``timeout`` passed first, or
            the line was already returned, or the process was spawned without a notice pipe.
        """
        with self._notice_lock:
            fd = self._notice_fd
            if fd is None:
                return None
            ready, _, _ = select.select([fd], [], [], max(timeout, 0.0))
            while ready:
                chunk = os.read(fd, 512)
                self._notice += chunk
                line, newline, _ = self._notice.partition(b"\n")
                if newline or not chunk or len(self._notice) > _NOTICE_MAX:
                    self._close_notice_locked()
                    return line[:_NOTICE_MAX].decode("utf-8", "replace") if newline else ""
                ready, _, _ = select.select([fd], [], [], 0)
            return None

    def _close_notice_locked(self) -> None:
        fd, self._notice_fd = self._notice_fd, None
        if fd is not None:
            os.close(fd)

    @property
    def pid(self) -> Optional[int]:
        """The process id on this machine."""
        return self._popen.pid

    def poll(self) -> Optional[int]:
        """Return the exit status once the process has ended, else ``None``."""
        status = self._popen.poll()
        if status is not None:
            with _spawned_lock:
                _spawned.discard(self)
        return status

    def terminate(self) -> None:
        """Send the process SIGTERM (the bridge then exits cleanly); nothing if it ended."""
        if self._popen.poll() is None:
            try:
                self._popen.terminate()
            except ProcessLookupError:
                pass

    def __del__(self) -> None:
        fd = getattr(self, "_notice_fd", None)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def __repr__(self) -> str:
        return f"LocalProcess(pid={self.pid})"


class LocalSandbox:
    """A folder on this machine as a sandbox: commands run here, with the folder as their
    working directory. No isolation: use it for your own code, demos and tests.

    Args:
        path: the workspace folder; it must exist.
        home: the folder for bridge_client's own files (default
            :func:`~bridge_client.paths.user_home`); state roots go in
            ``<home>/sandboxes/<sandbox id>``, never inside the workspace.

    Attributes:
        id: ``"local-"`` and 16 hex characters of a digest of the folder's real path: the
            same folder always gives the same id.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        NotADirectoryError: ``path`` is not a folder.
    """

    def __init__(self, path: "str | os.PathLike[str]", *, home: Optional[str] = None) -> None:
        real = os.path.realpath(os.fspath(path))
        if not os.path.exists(real):
            given = os.fspath(path)
            # `--sandbox=~/repo` reaches us with its '~': a shell expands it only at a word's start.
            hint = (
                f" ('~' is not expanded here: give the full path, {os.path.expanduser(given)!r})"
                if given.startswith("~") and os.path.expanduser(given) != given
                else ""
            )
            raise FileNotFoundError(f"sandbox folder {given!r} does not exist{hint}")
        if not os.path.isdir(real):
            raise NotADirectoryError(f"sandbox folder {os.fspath(path)!r} is not a folder")
        self._workdir = real
        self._id = self.id_for(real)
        self._home = os.path.abspath(home or user_home())
        self._state_root = os.path.join(self._home, "sandboxes", self._id)

    @staticmethod
    def id_for(path: "str | os.PathLike[str]") -> str:
        """The sandbox id a LocalSandbox of ``path`` has (``"local-"`` and 16 hex characters),
        whether or not the folder exists now: a folder removed while its bridge runs keeps its
        id, so its bridges can still be listed and stopped."""
        # fsencode: a folder name need not be valid UTF-8 (surrogateescape round-trips it).
        return "local-" + hashlib.sha256(os.fsencode(os.path.realpath(os.fspath(path)))).hexdigest()[:16]

    @property
    def id(self) -> str:
        """The sandbox id (stable for the same folder)."""
        return self._id

    @property
    def state_root(self) -> str:
        """``<home>/sandboxes/<id>``: where this sandbox's bridges keep their state."""
        return self._state_root

    @property
    def workdir(self) -> str:
        """The workspace folder (its real path)."""
        return self._workdir

    def _check_alive(self) -> None:
        if not os.path.isdir(self._workdir):
            raise SandboxGone(f"sandbox folder {self._workdir} is gone")

    def exec(
        self,
        argv: Sequence[str],
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
    ) -> ExecResult:
        """Run ``argv`` to completion in ``cwd`` (default: the workspace).

        Raises:
            SandboxGone: the workspace folder is gone.
            TimeoutError: it ran longer than ``timeout`` seconds (it is killed).
            FileNotFoundError: the program does not exist.
        """
        self._check_alive()
        _reap()
        # Its own process group, so a timeout kills what it started too (pip's children, say).
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd or self._workdir,
            env=_child_env(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise TimeoutError(f"{argv[0]} ran longer than {timeout} s") from None
        except BaseException:
            _kill_group(proc)
            raise
        return ExecResult(proc.returncode, stdout, stderr)

    spawn_notice = True
    """Processes from :meth:`spawn` get a notice pipe (see
    :meth:`~bridge_client.sandbox.local.LocalProcess.wait_notice`)."""

    def spawn(
        self,
        argv: Sequence[str],
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        log_path: Optional[str] = None,
    ) -> LocalProcess:
        """Start ``argv`` in a new session (no controlling terminal, own process group), so
        it outlives the host and a Ctrl-C in the host's terminal does not reach it.

        The process also gets a pipe it may write one line to when it is ready (its write
        end's number in ``BRIDGE_CLIENT_NOTICE_FD``; read it with
        :meth:`~bridge_client.sandbox.local.LocalProcess.wait_notice`): the bridge program
        writes it when it listens.

        Raises:
            SandboxGone: the workspace folder is gone.
            FileNotFoundError: the program does not exist.
            UntrustedFile: ``log_path`` or its folder is a symlink or not this user's own.
        """
        return self._spawn(argv, cwd, env, log_path, notice=True)

    def _spawn(
        self,
        argv: Sequence[str],
        cwd: Optional[str],
        env: Optional[Mapping[str, str]],
        log_path: Optional[str],
        notice: bool,
    ) -> LocalProcess:
        self._check_alive()
        _reap()
        log = None
        if log_path:
            make_private_dirs(os.path.dirname(os.path.abspath(log_path)), self._home)
            # Private: the bridge logs prompts' metadata and errors there. No-follow: a planted
            # symlink would have the bridge append to its target.
            log = os.fdopen(open_private(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND), "ab")
        child_env = _child_env(env)
        read_end: Optional[int] = None
        pass_fds: List[int] = []
        if notice:
            read_end, write_end = os.pipe()  # both close-on-exec; the child gets only its end
            pass_fds.append(write_end)
            child_env[NOTICE_FD_ENV] = str(write_end)
        try:
            popen = subprocess.Popen(
                list(argv),
                cwd=cwd or self._workdir,
                env=child_env,
                stdin=subprocess.DEVNULL,
                stdout=log if log is not None else subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                pass_fds=pass_fds,
            )
        except BaseException:
            if read_end is not None:
                os.close(read_end)
            raise
        finally:
            if log is not None:
                log.close()
            for fd in pass_fds:
                os.close(fd)
        return LocalProcess(popen, read_end)

    def read_file(self, path: str) -> bytes:
        """Return the bytes of ``path`` (a regular file; the open never blocks on a FIFO).

        Raises:
            FileNotFoundError: it does not exist.
            OSError: it is not a regular file, or cannot be read.
        """
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "not a regular file", path)
            os.set_blocking(fd, True)
            return f.read()

    def read_private_file(self, path: str) -> bytes:
        """Return the bytes of a state file only this user can have made: its folder a real
        folder (no symlink) of this user with mode 0700, the file a regular file of this user
        with mode 0600, opened without following a symlink or blocking. The launcher reads
        ``listening.json`` this way before it sends the token anywhere.

        Raises:
            FileNotFoundError: it does not exist.
            UntrustedFile: the file or its folder fails those checks.
        """
        check_folder(os.path.dirname(os.path.abspath(path)), private=True)
        return read_private(path, private=True)

    def write_file(self, path: str, data: bytes, *, mode: int = 0o600) -> None:
        """Write ``path`` atomically with ``mode`` (folders created 0700; existing folders of
        this sandbox's home must be this user's, not symlinks, and not writable by others).

        Raises:
            UntrustedFile: a folder on the way fails those checks.
            OSError: it cannot be written.
        """
        secure_write(path, data, mode, root=self._home)
        if path.startswith(self._state_root + os.sep):
            record = os.path.join(self._state_root, FOLDER_RECORD)
            if not os.path.lexists(record):  # once: a stat per write after that
                secure_write(record, os.fsencode(self._workdir), 0o600, root=self._home)

    def expose(self, port: int) -> Endpoint:
        """Return ``ws://127.0.0.1:<port>/``: the port is on this machine already."""
        return Endpoint(f"ws://127.0.0.1:{int(port)}/")

    def __repr__(self) -> str:
        return f"LocalSandbox({self._workdir!r}, id={self._id!r})"

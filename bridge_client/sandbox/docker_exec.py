"""Commands in a container: run to completion (:func:`run`) or detached (:func:`spawn`),
through ``/bin/sh`` wrappers, for :class:`~bridge_client.sandbox.docker.DockerSandbox`.

The engine knows an exec's process only by its pid on the engine's machine, so the run
wrapper prints the shell's pid first (the command then takes it over with ``exec``): a
timeout can kill the command and its process group from inside the container.
"""
from __future__ import annotations

import socket
import time
from typing import Mapping, Optional, Sequence

from ..errors import HarnessError, SandboxGone
from .base import ExecResult
from .docker_engine import Container
from .docker_tunnel import ExecStream, read_frames

__all__ = ["DockerProcess", "run", "spawn"]

# Runs argv; prints the shell's pid first (it becomes argv's pid), or says argv is missing.
_EXEC_WRAPPER = (
    'p=$(command -v "$1") || { printf "%s: not found\\n" "$1" >&2; exit 127; }; '
    'echo "$$"; case $p in */*) exec "$@";; *) "$@";; esac'  # a builtin (kill) has no file to exec
)
# Creates the log file (private) and runs argv detached, output appended to the log. A log
# that is a symlink or not a regular file is refused (exit 126): appending would write
# through it to a file the container's user did not mean.
_SPAWN_WRAPPER = (
    'log=$1; shift; '
    'if [ "$log" != /dev/null ] && { [ -L "$log" ] || { [ -e "$log" ] && [ ! -f "$log" ]; }; }; '
    'then exit 126; fi; '
    '(umask 077; mkdir -p "${log%/*}"; : >>"$log") || exit 126; '
    'command -v "$1" >/dev/null 2>&1 || { printf "%s: not found\\n" "$1" >>"$log"; exit 127; }; '
    'exec "$@" >>"$log" 2>&1 </dev/null'
)
_NOT_FOUND_MARK = b": not found\n"


class DockerProcess:
    """A process started by :meth:`DockerSandbox.spawn`: a detached exec in the container.

    Attributes:
        exec_id: the Docker exec id.
    """

    def __init__(self, container: Container, exec_id: str) -> None:
        self._container = container
        self.exec_id = exec_id

    @property
    def pid(self) -> Optional[int]:
        """``None``: the engine knows the process by its pid on the engine's machine, not
        inside the container."""
        return None

    def poll(self) -> Optional[int]:
        """The exit status once the process has ended, else ``None``.

        Raises:
            SandboxGone: the container is gone.
        """
        info = self._container.exec_inspect(self.exec_id)
        if info.get("Running"):
            return None
        code = info.get("ExitCode")
        return int(code) if code is not None else None

    def __repr__(self) -> str:
        return f"DockerProcess(exec_id={self.exec_id[:12]!r})"


def run(
    container: Container,
    argv: Sequence[str],
    *,
    workdir: str,
    env: Optional[Mapping[str, str]],
    timeout: Optional[float],
) -> ExecResult:
    """Run ``argv`` in the container to completion (see :meth:`DockerSandbox.exec`).

    Raises:
        SandboxGone: the container is gone or stopped, or the engine is unreachable.
        TimeoutError: it ran longer than ``timeout`` seconds (it is killed).
        FileNotFoundError: the program does not exist in the container.
        HarnessError: the container has no ``/bin/sh``.
    """
    exec_id, sock = container.start_exec(
        ["sh", "-c", _EXEC_WRAPPER, "sh", *argv], workdir=workdir, env=env
    )
    out = bytearray()
    err = bytearray()
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        if deadline is not None:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
        try:
            _read_until_end(sock, out, err, deadline)
        except socket.timeout:
            pid = _leading_pid(out)
            if pid is not None:
                _kill(container, pid)
            raise TimeoutError(f"{argv[0]} ran longer than {timeout} s") from None
        except OSError as exc:
            if not container.running():
                raise SandboxGone(
                    f"container {container.short} went away while running {argv[0]}"
                ) from None
            raise SandboxGone(f"the Docker engine dropped the command {argv[0]}: {exc}") from None
    finally:
        try:
            sock.close()
        except OSError:
            pass
    code = _exit_code(container, exec_id)
    pid = _leading_pid(out)
    if pid is None:
        if code == 127 and bytes(err).endswith(_NOT_FOUND_MARK):
            raise FileNotFoundError(2, f"no such program in container {container.short}", argv[0])
        if code in (126, 127) and b"exec" in bytes(out + err) and b"sh" in bytes(out + err):
            said = bytes(out + err).decode("utf-8", "replace").strip()
            raise HarnessError(f"container {container.short} has no /bin/sh: {said}")
    else:
        del out[: out.index(b"\n") + 1]
    return ExecResult(code, bytes(out), bytes(err))


def spawn(
    container: Container,
    argv: Sequence[str],
    *,
    workdir: str,
    env: Optional[Mapping[str, str]],
    log_path: Optional[str],
) -> DockerProcess:
    """Start ``argv`` detached (see :meth:`DockerSandbox.spawn`).

    Raises:
        SandboxGone: the container is gone or stopped, or the engine is unreachable.
    """
    exec_id = container.start_detached(
        ["sh", "-c", _SPAWN_WRAPPER, "sh", log_path or "/dev/null", *argv], workdir=workdir, env=env
    )
    return DockerProcess(container, exec_id)


def _read_until_end(
    sock: ExecStream, out: bytearray, err: bytearray, deadline: Optional[float]
) -> None:
    def on_out(data: bytes) -> None:
        out.extend(data)
        if deadline is not None:
            sock.settimeout(max(0.001, deadline - time.monotonic()))

    def on_err(data: bytes) -> None:
        err.extend(data)
        if deadline is not None:
            sock.settimeout(max(0.001, deadline - time.monotonic()))

    read_frames(sock, on_out, on_err)


def _leading_pid(out: bytearray) -> Optional[int]:
    end = out.find(b"\n")
    if end <= 0:
        return None
    try:
        return int(out[:end])
    except ValueError:
        return None


def _exit_code(container: Container, exec_id: str) -> int:
    # The stream ends a moment before the engine records the exit status.
    deadline = time.monotonic() + 10.0
    pause = 0.005
    while True:
        info = container.exec_inspect(exec_id)
        if not info.get("Running") and info.get("ExitCode") is not None:
            return int(info["ExitCode"])
        if time.monotonic() > deadline:
            if not container.running():
                raise SandboxGone(f"container {container.short} is not running")
            return -1
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def _kill(container: Container, pid: int) -> None:
    # An exec'd process leads its own process group: kill the group (what it started too).
    script = f"kill -9 -{int(pid)} 2>/dev/null || kill -9 {int(pid)} 2>/dev/null"
    try:
        container.start_detached(["sh", "-c", script], workdir="/")
    except HarnessError:
        pass

"""SSHSandbox: a folder on another machine, reached over SSH (the ``ssh`` extra, paramiko).

Commands run through ``exec`` channels, files move through SFTP, and the bridge's port is
reached through a ``direct-tcpip`` channel of the same SSH connection, so the bridge listens
on the remote machine's loopback only::

    sandbox = SSHSandbox("build-01.example.com", "/srv/work/repo", user="agent")
    try:
        ...  # Workspace(sandbox=sandbox)
    finally:
        sandbox.close()

The remote machine needs ``/bin/sh`` with a POSIX login shell, ``python3`` (3.9 or newer;
the bridge template copies this package in as wheels), an SFTP subsystem and TCP forwarding
to its loopback (``AllowTcpForwarding local`` or ``yes`` in ``sshd_config``). The server's host
key must be in ``known_hosts``. See :doc:`scaling`.
"""
from __future__ import annotations

import hashlib
import logging
import os
import posixpath
import secrets
import shlex
import socket
import threading
import time
from typing import Any, List, Mapping, Optional, Sequence

from ..errors import SandboxGone, UntrustedFile
from .base import Endpoint, ExecResult
from .ssh_files import create_private, is_dir, make_dirs
from .ssh_forward import Forwarder
from .ssh_link import SSHLink, SSHTarget, link_for, release
from .ssh_scripts import (
    CWD_MARK, EXEC_WRAPPER, NOT_FOUND_MARK, SPAWN_INNER, SPAWN_WRAPPER, drain, env_script, leading_pid,
)

__all__ = ["SSHSandbox", "SSHProcess"]

log = logging.getLogger("bridge_client")


class SSHProcess:
    """A process started by :meth:`SSHSandbox.spawn`, detached on the remote machine.

    Attributes:
        status_path: the remote file its exit status is written to when it ends.
    """

    def __init__(self, sandbox: "SSHSandbox", pid: Optional[int], status_path: str) -> None:
        self._sandbox = sandbox
        self._pid = pid
        self.status_path = status_path
        self._status: Optional[int] = None

    @property
    def pid(self) -> Optional[int]:
        """The pid, on the remote machine, of the small shell that runs the program and
        records its exit status (the program is its child)."""
        return self._pid

    def poll(self) -> Optional[int]:
        """The program's exit status once it has ended, else ``None`` (read from
        ``status_path``, which is removed once read).

        Raises:
            SandboxGone: the host no longer answers.
        """
        if self._status is not None:
            return self._status
        try:
            data = self._sandbox.read_file(self.status_path)
        except FileNotFoundError:
            return None
        try:
            self._status = int(data.strip())
        except ValueError:
            return None
        try:
            self._sandbox._link.sftp_call(lambda s: s.remove(self.status_path), "removing a status file")
        except OSError:
            pass
        return self._status

    def __repr__(self) -> str:
        return f"SSHProcess(pid={self._pid})"


def _local_file(path: Optional[str], what: str) -> Optional[str]:
    """``path`` with ``~`` expanded, checked before connecting: paramiko opens it as given (a
    ``~`` fails) and a missing file would look like a host that does not answer."""
    if path is None:
        return None
    full = os.path.expanduser(path)
    if not os.path.exists(full):
        raise FileNotFoundError(f"the SSH {what} file {path!r} does not exist")
    if not os.path.isfile(full):
        raise ValueError(f"the SSH {what} file {path!r} is not a file")
    return full


class SSHSandbox:
    """A folder on a machine reached over SSH, as a sandbox (see the module's docs).

    Sandboxes of the same host, port and user in one process share one SSH connection (the
    first one's login options make it); it is connected again when it drops, and closed when
    the last of them is closed.

    Args:
        host: the host name or address (as written, lowercased, it is part of the sandbox id).
        path: the agent's folder on the remote machine (absolute, or relative to the remote
            user's home); it must exist.
        user: the remote user (default: this user's login name).
        port: the SSH port.
        key_filename: a private key file; ``None`` tries the SSH agent and ``~/.ssh/id_*``.
        allow_agent: whether a running SSH agent's keys may be used.
        known_hosts: the file the server's host key must be in (default
            ``~/.ssh/known_hosts``); an unknown or changed key is refused, never added.
        connect_timeout: seconds for connecting and logging in.
        reconnect_window: seconds during which a dropped connection is made again before the
            sandbox counts as gone; keep it at the sessions' ``resend_window`` (30 s).
        keepalive: seconds between SSH keepalives (0: none).
        timeout: seconds an SFTP answer may take before the connection counts as dropped (a
            host that goes silent, without closing the connection, is gone after ``timeout``
            plus ``reconnect_window`` seconds).
        state_root: where bridges keep their state on the remote machine (default
            ``~/.local/state/bridge-client/sandboxes/<id>`` of the remote user).

    Attributes:
        id: ``"ssh-"`` and 16 hex characters of a digest of user, host, port and the
            folder's real path: the same remote folder always gives the same id.

    Raises:
        UntrustedEndpoint: the server's host key is not in ``known_hosts``, or differs.
        Unauthorized: the server refused the credentials.
        SandboxGone: the host does not answer within ``connect_timeout``; at once when
            nothing listens on the port ("connection refused") or something other than SSH
            answers there (its first line is quoted: "HOST:PORT answers, but not with SSH:
            got 'HTTP/1.1 400 Bad Request'"); after ``connect_timeout`` when the port accepts
            the connection and says nothing.
        FileNotFoundError: ``path`` does not exist there, or ``key_filename`` or
            ``known_hosts`` does not exist here (a leading ``~`` in them is expanded).
        NotADirectoryError: ``path`` is not a folder.
        ValueError: ``key_filename`` or ``known_hosts`` is not a file.
        HarnessError: paramiko is not installed.
    """

    def __init__(
        self,
        host: str,
        path: str,
        *,
        user: Optional[str] = None,
        port: int = 22,
        key_filename: Optional[str] = None,
        allow_agent: bool = True,
        known_hosts: Optional[str] = None,
        connect_timeout: float = 10.0,
        reconnect_window: float = 30.0,
        keepalive: float = 15.0,
        timeout: float = 10.0,
        state_root: Optional[str] = None,
    ) -> None:
        if not host:
            raise ValueError("SSHSandbox needs a host")
        if not 0 < int(port) < 65536:
            raise ValueError(f"not a TCP port: {port}")
        if user is None:
            import getpass

            user = getpass.getuser()
        self._target = SSHTarget(
            host=host, port=int(port), user=user, key_filename=_local_file(key_filename, "key"),
            allow_agent=allow_agent, known_hosts=_local_file(known_hosts, "known_hosts"),
            connect_timeout=connect_timeout,
            reconnect_window=reconnect_window, keepalive=keepalive, timeout=timeout,
        )
        self._lock = threading.Lock()
        self._closed = False
        self._link_now: SSHLink = link_for(self._target)
        try:
            self._link.transport(time.monotonic() + connect_timeout)  # fail fast on bad keys
            home = self._link.sftp_call(lambda s: s.normalize("."), "finding the home folder")
            wanted = path if path.startswith("/") else posixpath.join(home, path)
            real = self._link.sftp_call(lambda s: s.normalize(wanted), f"resolving {path}")
            attrs = self._link.sftp_call(lambda s: s.stat(real), f"looking at {path}")
        except FileNotFoundError:
            self.close()
            raise FileNotFoundError(
                f"sandbox folder {path!r} does not exist on {self._target.name}"
            ) from None
        except BaseException:
            self.close()
            raise
        if not is_dir(attrs.st_mode):
            self.close()
            raise NotADirectoryError(f"sandbox folder {path!r} on {self._target.name} is not a folder")
        self._workdir = real
        ident = f"{user}@{host.lower()}:{int(port)}:{real}".encode("utf-8", "surrogateescape")
        self._id = "ssh-" + hashlib.sha256(ident).hexdigest()[:16]
        self._state_root = state_root or posixpath.join(
            home, ".local", "state", "bridge-client", "sandboxes", self._id
        )

    # -- the Sandbox protocol -------------------------------------------------------------

    @property
    def id(self) -> str:
        """The sandbox id (stable for the same user, host, port and remote folder)."""
        return self._id

    @property
    def state_root(self) -> str:
        """Where this sandbox's bridges keep their state on the remote machine."""
        return self._state_root

    @property
    def workdir(self) -> str:
        """The agent's folder on the remote machine (its real path)."""
        return str(self._workdir)

    @property
    def _link(self) -> SSHLink:
        """This process's link: a forked child must not use the parent's SSH connection (the
        two would interleave their packets), so it gets one of its own."""
        link = self._link_now
        if link.pid != os.getpid():
            link = self._link_now = link_for(self._target)
        return link

    @property
    def target(self) -> SSHTarget:
        """How the host is reached (host, port, user and the connection's options)."""
        return self._target

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxGone(f"SSHSandbox {self._target.name}:{self._workdir} was closed")

    def _check_alive(self) -> None:
        """The remote folder must still be there (a removed folder is a gone sandbox)."""
        try:
            self._link.sftp_call(lambda s: s.stat(self._workdir), "looking at the sandbox folder")
        except FileNotFoundError:
            raise SandboxGone(f"sandbox folder {self._workdir} on {self._target.name} is gone") from None

    def _run(
        self, argv: Sequence[str], stdin: bytes, timeout: Optional[float], what: str
    ) -> ExecResult:
        """Run a shell command line on a new channel; return its output and status."""
        command = " ".join(shlex.quote(a) for a in argv)
        deadline = None if timeout is None else time.monotonic() + timeout
        out: List[bytes] = []
        err: List[bytes] = []
        with self._link.session_channel() as chan:
            transport = chan.get_transport()
            try:
                chan.exec_command("exec " + command)
                chan.sendall(stdin)
                chan.shutdown_write()
                reader = threading.Thread(target=drain, args=(chan.recv_stderr, err), daemon=True)
                reader.start()
                while True:
                    chan.settimeout(None if deadline is None else max(0.001, deadline - time.monotonic()))
                    data = chan.recv(65536)
                    if not data:
                        break
                    out.append(data)
                left = None if deadline is None else max(0.001, deadline - time.monotonic())
                reader.join(left)
                if not chan.status_event.wait(left if left is not None else self._target.timeout):
                    raise socket.timeout()
            except socket.timeout:
                if not self._link.alive(transport):
                    raise SandboxGone(
                        f"the SSH connection to {self._target.name} dropped during {what}"
                    ) from None
                self._kill_group(b"".join(out))
                raise TimeoutError(f"{what} ran longer than {timeout} s") from None
            except (OSError, EOFError, self._link._paramiko.SSHException) as exc:
                raise SandboxGone(
                    f"the SSH connection to {self._target.name} dropped during {what}: {exc}"
                ) from None
            except BaseException:  # KeyboardInterrupt: the command does not run on unseen
                self._kill_group(b"".join(out))
                raise
            code = chan.exit_status  # -1: no exit-status came (a signal, or a drop)
            if code == -1 and not self._link.alive(transport):
                raise SandboxGone(f"the SSH connection to {self._target.name} dropped during {what}")
        return ExecResult(int(code), b"".join(out), b"".join(err))

    def _kill_group(self, out: bytes) -> None:
        pid = leading_pid(out)
        if pid is None:
            return
        script = f"kill -9 -{pid} 2>/dev/null || kill -9 {pid} 2>/dev/null; true"
        try:
            with self._link.session_channel(time.monotonic() + self._target.connect_timeout) as chan:
                chan.settimeout(self._target.connect_timeout)
                chan.exec_command(script)
                chan.status_event.wait(self._target.connect_timeout)
        except Exception as exc:  # the host went away: nothing is left to kill from here
            log.debug("ssh %s: could not kill process group %d: %s", self._target.name, pid, exc)

    def exec(
        self,
        argv: Sequence[str],
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
    ) -> ExecResult:
        """Run ``argv`` on the remote machine to completion, in ``cwd`` (default: the
        folder), with ``env`` added to the login's environment (sent on the channel's input,
        never in a command line).

        Raises:
            SandboxGone: the folder is gone, or the connection dropped while it ran (it may
                or may not have finished), or the host does not answer within
                ``reconnect_window``.
            TimeoutError: it ran longer than ``timeout`` seconds (its process group is killed).
            FileNotFoundError: the program, or ``cwd``, does not exist there.
            ValueError: an environment variable's name is not a shell name.
        """
        self._check_open()
        if not argv:
            raise ValueError("argv must name a program")
        stdin = env_script(env)
        self._check_alive()
        folder = cwd or self._workdir
        result = self._run(["sh", "-c", EXEC_WRAPPER, "sh", folder, *argv], stdin, timeout, argv[0])
        out = result.stdout
        pid = leading_pid(out)
        if pid is None:
            if result.exit_code == 126 and result.stderr.startswith(CWD_MARK):
                raise FileNotFoundError(2, f"no such folder on {self._target.name}", folder)
            if result.exit_code == 127 and result.stderr.endswith(NOT_FOUND_MARK):
                raise FileNotFoundError(2, f"no such program on {self._target.name}", argv[0])
            return result
        return ExecResult(result.exit_code, out[out.index(b"\n") + 1:], result.stderr)

    def spawn(
        self,
        argv: Sequence[str],
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        log_path: Optional[str] = None,
    ) -> SSHProcess:
        """Start ``argv`` detached on the remote machine: in a session of its own (``setsid``;
        without it, its own process group with SIGHUP ignored), so it outlives the SSH
        connection and the host. Its output is appended to ``log_path`` (created 0600, its
        folders 0700), else discarded; its exit status goes to a file that
        :meth:`SSHProcess.poll` reads.

        Raises:
            SandboxGone: the folder is gone, or the host does not answer.
            FileNotFoundError: the program does not exist there.
        """
        self._check_open()
        if not argv:
            raise ValueError("argv must name a program")
        stdin = env_script(env)
        self._check_alive()
        log_file = log_path or "/dev/null"
        status = posixpath.join(self._state_root, "spawned", f"{secrets.token_hex(8)}.exit")
        folder = cwd or self._workdir
        argv_all = ["sh", "-c", SPAWN_WRAPPER, "sh", SPAWN_INNER, folder, log_file, status, *argv]
        result = self._run(argv_all, stdin, self._target.connect_timeout + self._target.timeout, argv[0])
        if result.exit_code == 127:
            raise FileNotFoundError(2, f"no such program on {self._target.name}", argv[0])
        if result.exit_code == 126:
            raise FileNotFoundError(2, f"no such folder on {self._target.name}", folder)
        if result.exit_code == 125 and b"is a symlink or not a regular file" in result.stderr:
            raise UntrustedFile(
                f"the log {log_file} on {self._target.name} is a symlink or not a regular file; "
                "refusing to append through it (remove it)", log_file,
            )
        if not result.ok:
            said = (result.stdout + result.stderr).decode("utf-8", "replace").strip()
            raise OSError(f"cannot start {argv[0]} on {self._target.name} (exit {result.exit_code}): {said}")
        return SSHProcess(self, leading_pid(result.stdout), status)

    def read_file(self, path: str) -> bytes:
        """Return a file's bytes, read through SFTP (following symlinks).

        Raises:
            FileNotFoundError: no such file.
            SandboxGone: the host does not answer within ``reconnect_window``.
        """
        self._check_open()

        def read(sftp: Any) -> bytes:
            with sftp.open(path, "rb") as f:
                data: bytes = f.read()
                return data

        return self._link.sftp_call(read, f"reading {path}")

    def write_file(self, path: str, data: bytes, *, mode: int = 0o600) -> None:
        """Write a file atomically through SFTP: a temporary file in the same folder, created
        with ``mode`` before any byte is written, then renamed over ``path``; missing folders
        are created 0700.

        Raises:
            SandboxGone: the host does not answer within ``reconnect_window``.
            OSError: the file cannot be written there.
        """
        self._check_open()
        folder, name = posixpath.split(posixpath.normpath(path))
        if not name or not folder.startswith("/"):
            raise ValueError(f"write_file needs an absolute file path, got {path!r}")

        def write(sftp: Any) -> None:
            make_dirs(sftp, folder)
            tmp = posixpath.join(folder, f".{name}.tmp-{secrets.token_hex(4)}")
            try:
                with create_private(sftp, tmp, mode & 0o7777) as f:
                    f.set_pipelined(True)
                    f.write(data)
                sftp.chmod(tmp, mode & 0o7777)  # the server's umask applied to the create
                sftp.posix_rename(tmp, path)
            except BaseException:
                try:
                    sftp.remove(tmp)
                except Exception:
                    pass
                raise

        self._link.sftp_call(write, f"writing {path}")

    def expose(self, port: int) -> Endpoint:
        """Return ``ws://127.0.0.1:<local port>/``: a loopback listener of this process whose
        connections reach ``port`` on the remote machine's loopback over the SSH connection
        (one per remote port, shared by the sandboxes of the connection).

        Raises:
            SandboxGone: the host does not answer within ``reconnect_window``, or the sandbox
                was closed.
        """
        self._check_open()
        port = int(port)
        if not 0 < port < 65536:
            raise ValueError(f"not a TCP port: {port}")
        self._link.transport()
        with self._link._lock:
            forwarder = self._link.extras.get(port)
            if forwarder is None:
                forwarder = Forwarder(self._link, port)
                self._link.extras[port] = forwarder
        return Endpoint(f"ws://127.0.0.1:{forwarder.port}/")

    # -- lifetime ------------------------------------------------------------------------------

    def close(self) -> None:
        """Let go of the shared SSH connection (the last sandbox on it closes it, with its
        forwarders); processes started on the remote machine keep running. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._link_now.pid == os.getpid():
            release(self._link_now)

    def __enter__(self) -> "SSHSandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        workdir = getattr(self, "_workdir", "?")
        return f"SSHSandbox({self._target.name!r}, {workdir!r})"

"""DockerSandbox: a Docker container as the sandbox (the ``docker`` extra).

The agent and its bridge run inside a container that stays up; the host reaches them through
the Docker Engine API only (docker SDK for Python): commands through exec, files through the
archive endpoints, the bridge's port through a tunnel over exec (``docker_tunnel``), so the
container may have no network at all (``network_mode="none"``).

    sandbox = DockerSandbox.create("python:3.12-slim", network_mode="none")
    try:
        ...  # Workspace(sandbox=sandbox)
    finally:
        sandbox.remove()

Commands need ``/bin/sh`` in the image; the tunnel and the bridge need Python 3.9 or newer
(``python=``). A container that was removed, or is not running, is :class:`SandboxGone`, so a
session ends as C15 says.
"""
from __future__ import annotations

import importlib
import io
import logging
import posixpath
import secrets
import socket
import tarfile
import threading
import time
from typing import Any, Dict, Iterator, Mapping, Optional, Sequence, Tuple

from contextlib import contextmanager

from ..errors import HarnessError, SandboxGone
from .base import Endpoint, ExecResult
from .docker_tunnel import FORWARDER, ExecStream, Tunnel, read_frames

__all__ = ["DockerSandbox", "DockerProcess", "LABEL", "IMAGE_LABEL"]

log = logging.getLogger("bridge_client")

LABEL = "io.bridge-client.sandbox"
"""The label on every container :meth:`DockerSandbox.create` starts (value ``"1"``), so
leftovers can be found: ``docker ps -a --filter label=io.bridge-client.sandbox``."""

IMAGE_LABEL = "io.bridge-client.image"
"""The label naming the image on containers made by :meth:`DockerSandbox.for_image`."""

_DIR_BIT = 1 << 31  # Go's os.ModeDir in the archive stat header
_SYMLINK_BIT = 1 << 27  # os.ModeSymlink
_MAX_LINKS = 8
# Runs argv; prints the shell's pid first (it becomes argv's pid), or says argv is missing.
_EXEC_WRAPPER = (
    'p=$(command -v "$1") || { printf "%s: not found\\n" "$1" >&2; exit 127; }; '
    'echo "$$"; case $p in */*) exec "$@";; *) "$@";; esac'  # a builtin (kill) has no file to exec
)
# Creates the log file (private) and runs argv detached, output appended to the log.
_SPAWN_WRAPPER = (
    'log=$1; shift; (umask 077; mkdir -p "${log%/*}"; : >>"$log") || exit 126; '
    'command -v "$1" >/dev/null 2>&1 || { printf "%s: not found\\n" "$1" >>"$log"; exit 127; }; '
    'exec "$@" >>"$log" 2>&1 </dev/null'
)
_NOT_FOUND_MARK = b": not found\n"


def _docker() -> Any:
    try:
        docker = importlib.import_module("docker")  # untyped: kept as Any
    except ImportError:
        raise HarnessError(
            "DockerSandbox needs the docker SDK for Python: pip install 'bridge-client[docker]'"
        ) from None
    return docker


def _engine_client(client: Any) -> Any:
    docker = _docker()
    if client is not None:
        return client
    try:
        return docker.from_env()
    except docker.errors.DockerException as exc:
        raise SandboxGone(f"cannot reach the Docker engine: {exc}") from None


class DockerProcess:
    """A process started by :meth:`DockerSandbox.spawn`: a detached exec in the container.

    Attributes:
        exec_id: the Docker exec id.
    """

    def __init__(self, sandbox: "DockerSandbox", exec_id: str) -> None:
        self._sandbox = sandbox
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
        with self._sandbox._api_errors():
            info = self._sandbox._api.exec_inspect(self.exec_id)
        if info.get("Running"):
            return None
        code = info.get("ExitCode")
        return int(code) if code is not None else None

    def __repr__(self) -> str:
        return f"DockerProcess(exec_id={self.exec_id[:12]!r})"


class DockerSandbox:
    """A Docker container as a sandbox (see the module's docs).

    Use :meth:`create` to start a container, or :meth:`attach` to wrap one that exists.

    Args:
        container_id: the container's id or name (it must exist).
        client: a ``docker.DockerClient`` (default ``docker.from_env()``).
        python: the container's Python, for the tunnel's forwarder (``"python3"``).
        state_root: the folder in the container for bridge state (default
            ``/var/lib/bridge-client`` when the container runs as root, else
            ``/tmp/bridge-client-<user>``).
        workdir: the agent's folder in the container (default: the container's working
            folder, else ``/``).

    Attributes:
        id: the container's full id (the sandbox id, C01).
        python: the interpreter the tunnel's forwarders run with.

    Raises:
        SandboxGone: no such container, or the engine cannot be reached.
        HarnessError: the ``docker`` package is not installed.
    """

    def __init__(
        self,
        container_id: str,
        *,
        client: Any = None,
        python: str = "python3",
        state_root: Optional[str] = None,
        workdir: Optional[str] = None,
    ) -> None:
        docker = _docker()
        self._errors = docker.errors
        self._owns_client = client is None
        self._client = _engine_client(client)
        self._api = self._client.api
        self.python = python
        self._lock = threading.Lock()
        self._tunnels: Dict[int, Tunnel] = {}
        self._closed = False
        self._owner: Optional[Tuple[int, int]] = None
        self._id = container_id
        try:
            with self._api_errors():
                info = self._api.inspect_container(container_id)
        except BaseException:
            if self._owns_client:
                self._client.close()
            raise
        self._id = str(info["Id"])
        config = info.get("Config") or {}
        user = str(config.get("User") or "")
        self._root_user = user.split(":")[0] in ("", "0", "root")
        if self._root_user:
            self._owner = (0, 0)
        self._network_mode = str((info.get("HostConfig") or {}).get("NetworkMode") or "")
        self._workdir = workdir or str(config.get("WorkingDir") or "") or "/"
        self._state_root = state_root or (
            "/var/lib/bridge-client" if self._root_user else f"/tmp/bridge-client-{user.split(':')[0]}"
        )

    # -- creation -------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        image: str,
        *,
        client: Any = None,
        network_mode: Optional[str] = None,
        workdir: str = "/workspace",
        command: Sequence[str] = ("sleep", "infinity"),
        labels: Optional[Mapping[str, str]] = None,
        python: str = "python3",
        state_root: Optional[str] = None,
        **run_options: Any,
    ) -> "DockerSandbox":
        """Start a container from ``image`` that stays up, and return it as a sandbox.

        Args:
            image: the image (it must be on the engine: nothing is pulled here).
            client: a ``docker.DockerClient`` (default ``docker.from_env()``).
            network_mode: ``"none"`` for no network at all, ``"host"``, a network name, or
                ``None`` for the engine's default.
            workdir: the agent's folder, created by the engine.
            command: what the container runs to stay up (with ``init=True``: a small init
                reaps the processes the bridge leaves).
            labels: extra labels; :data:`LABEL` is always set.
            python, state_root: as for the constructor.
            run_options: more keyword arguments for ``client.containers.run`` (``user``,
                ``volumes``, ``mem_limit``...).

        Returns:
            The sandbox; :meth:`remove` removes the container, :meth:`close` only lets go of it.

        Raises:
            SandboxGone: the engine cannot be reached.
            HarnessError: the image is not there, or the engine refused to start it.
        """
        docker = _docker()
        engine = _engine_client(client)
        all_labels = {LABEL: "1", **dict(labels or {})}
        options: Dict[str, Any] = {"init": True, "working_dir": workdir, **run_options}
        if network_mode is not None:
            options["network_mode"] = network_mode
        try:
            # create + start, not run: run would pull a missing image from a registry.
            container = engine.containers.create(image, list(command), labels=all_labels, **options)
        except docker.errors.ImageNotFound:
            if client is None:
                engine.close()
            raise HarnessError(
                f"the image {image!r} is not on the Docker engine (pull or build it first)"
            ) from None
        except docker.errors.APIError as exc:
            if client is None:
                engine.close()
            raise HarnessError(
                f"the Docker engine could not create a container of {image!r}: {exc.explanation or exc}"
            ) from None
        try:
            container.start()
        except docker.errors.APIError as exc:
            _remove_quietly(engine, container.id)
            if client is None:
                engine.close()
            raise HarnessError(
                f"the Docker engine could not start {image!r}: {exc.explanation or exc}"
            ) from None
        try:
            sandbox = cls(container.id, client=engine, python=python, state_root=state_root, workdir=workdir)
        except BaseException:
            _remove_quietly(engine, container.id)
            raise
        sandbox._owns_client = client is None
        return sandbox

    @classmethod
    def for_image(cls, image: str, *, client: Any = None, **create_options: Any) -> "DockerSandbox":
        """Attach to the running container that an earlier call made for ``image``, or
        create one (labelled ``io.bridge-client.image=<image>``; it stays up after the
        program ends, so later commands find its bridges). The CLI's ``--sandbox
        docker:IMAGE`` uses this; remove such containers with ``docker rm -f``.

        Raises:
            SandboxGone: the engine cannot be reached.
            HarnessError: the image is not on the engine, or it could not be started.
        """
        engine = _engine_client(client)
        docker = _docker()
        try:
            found = engine.api.containers(
                filters={"label": [f"{LABEL}=1", f"{IMAGE_LABEL}={image}"], "status": "running"}
            )
        except docker.errors.DockerException as exc:
            raise SandboxGone(f"cannot reach the Docker engine: {exc}") from None
        python = create_options.pop("python", "python3")
        if found:
            oldest = min(found, key=lambda c: (c.get("Created", 0), c["Id"]))
            state_root = create_options.get("state_root")
            sandbox = cls(oldest["Id"], client=engine, python=python, state_root=state_root)
        else:
            labels = {IMAGE_LABEL: image, **dict(create_options.pop("labels", None) or {})}
            sandbox = cls.create(image, client=engine, labels=labels, python=python, **create_options)
        sandbox._owns_client = client is None
        return sandbox

    @classmethod
    def attach(cls, container_id: str, **kwargs: Any) -> "DockerSandbox":
        """Wrap a container that exists (running). Same keyword arguments as the constructor.

        Raises:
            SandboxGone: no such container, or the engine cannot be reached.
        """
        return cls(container_id, **kwargs)

    # -- the Sandbox protocol ------------------------------------------------------------------

    @property
    def id(self) -> str:
        """The container's full id."""
        return self._id

    @property
    def state_root(self) -> str:
        """Where bridges keep their state inside the container."""
        return self._state_root

    @property
    def workdir(self) -> str:
        """The agent's folder inside the container."""
        return self._workdir

    @contextmanager
    def _api_errors(self, path: Optional[str] = None) -> Iterator[None]:
        """Turn the engine's errors into the sandbox's: gone container -> SandboxGone;
        a missing ``path`` -> FileNotFoundError."""
        errors = self._errors
        try:
            yield
        except errors.NotFound as exc:
            if path is not None and self._exists():
                raise FileNotFoundError(2, f"no such file in container {self._id[:12]}", path) from None
            raise SandboxGone(f"container {self._id[:12]} is gone: {exc.explanation or exc}") from None
        except errors.APIError as exc:
            if exc.status_code == 409 or not self._running():
                raise SandboxGone(
                    f"container {self._id[:12]} is not running: {exc.explanation or exc}"
                ) from None
            raise HarnessError(f"the Docker engine refused: {exc.explanation or exc}") from None
        except (errors.DockerException, ConnectionError) as exc:
            raise SandboxGone(f"cannot reach the Docker engine: {exc}") from None
        except OSError as exc:  # requests' connection errors are OSErrors too
            if isinstance(exc, (FileNotFoundError, TimeoutError, IsADirectoryError)):
                raise
            raise SandboxGone(f"cannot reach the Docker engine: {exc}") from None

    def _inspect(self) -> Optional[Dict[str, Any]]:
        try:
            info: Dict[str, Any] = self._api.inspect_container(self._id)
            return info
        except self._errors.NotFound:
            return None

    def _exists(self) -> bool:
        try:
            return self._inspect() is not None
        except Exception:
            return False

    def _running(self) -> bool:
        try:
            info = self._inspect()
        except Exception:
            return False
        return bool(info and (info.get("State") or {}).get("Running"))

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxGone(f"DockerSandbox {self._id[:12]} was closed")

    def _start_exec(
        self,
        argv: Sequence[str],
        *,
        cwd: Optional[str],
        env: Optional[Mapping[str, str]],
        stdin: bool = False,
    ) -> Tuple[str, ExecStream]:
        with self._api_errors():
            created = self._api.exec_create(
                self._id, list(argv), stdout=True, stderr=True, stdin=stdin, tty=False,
                environment=dict(env) if env else None, workdir=cwd or self._workdir,
            )
            exec_id = str(created["Id"])
            raw = self._api.exec_start(exec_id, socket=True)
        return exec_id, _hijacked(raw)

    def exec(
        self,
        argv: Sequence[str],
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
    ) -> ExecResult:
        """Run ``argv`` in the container to completion (through ``/bin/sh``, which records its
        pid so a timeout can kill it and its process group).

        Raises:
            SandboxGone: the container is gone or stopped, or the engine is unreachable.
            TimeoutError: it ran longer than ``timeout`` seconds (it is killed).
            FileNotFoundError: the program does not exist in the container.
        """
        self._check_open()
        if not argv:
            raise ValueError("argv must name a program")
        exec_id, sock = self._start_exec(["sh", "-c", _EXEC_WRAPPER, "sh", *argv], cwd=cwd, env=env)
        out = bytearray()
        err = bytearray()
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            if deadline is not None:
                sock.settimeout(max(0.001, deadline - time.monotonic()))
            try:
                self._read_until_end(sock, out, err, deadline)
            except socket.timeout:
                pid = self._leading_pid(out)
                if pid is not None:
                    self._kill(pid)
                raise TimeoutError(f"{argv[0]} ran longer than {timeout} s") from None
            except OSError as exc:
                if not self._running():
                    raise SandboxGone(
                        f"container {self._id[:12]} went away while running {argv[0]}"
                    ) from None
                raise SandboxGone(f"the Docker engine dropped the command {argv[0]}: {exc}") from None
        finally:
            try:
                sock.close()
            except OSError:
                pass
        code = self._exit_code(exec_id)
        pid = self._leading_pid(out)
        if pid is None:
            if code == 127 and bytes(err).endswith(_NOT_FOUND_MARK):
                raise FileNotFoundError(2, f"no such program in container {self._id[:12]}", argv[0])
            if code in (126, 127) and b"exec" in bytes(out + err) and b"sh" in bytes(out + err):
                said = bytes(out + err).decode("utf-8", "replace").strip()
                raise HarnessError(f"container {self._id[:12]} has no /bin/sh: {said}")
        else:
            del out[: out.index(b"\n") + 1]
        return ExecResult(code, bytes(out), bytes(err))

    @staticmethod
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

    @staticmethod
    def _leading_pid(out: bytearray) -> Optional[int]:
        end = out.find(b"\n")
        if end <= 0:
            return None
        try:
            return int(out[:end])
        except ValueError:
            return None

    def _exit_code(self, exec_id: str) -> int:
        # The stream ends a moment before the engine records the exit status.
        deadline = time.monotonic() + 10.0
        pause = 0.005
        while True:
            with self._api_errors():
                info = self._api.exec_inspect(exec_id)
            if not info.get("Running") and info.get("ExitCode") is not None:
                return int(info["ExitCode"])
            if time.monotonic() > deadline:
                if not self._running():
                    raise SandboxGone(f"container {self._id[:12]} is not running")
                return -1
            time.sleep(pause)
            pause = min(pause * 2, 0.1)

    def _kill(self, pid: int) -> None:
        try:
            with self._api_errors():
                # An exec'd process leads its own process group: kill the group (what it started too).
                script = f"kill -9 -{int(pid)} 2>/dev/null || kill -9 {int(pid)} 2>/dev/null"
                created = self._api.exec_create(self._id, ["sh", "-c", script])
                self._api.exec_start(created["Id"], detach=True)
        except HarnessError:
            pass

    def spawn(
        self,
        argv: Sequence[str],
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        log_path: Optional[str] = None,
    ) -> DockerProcess:
        """Start ``argv`` as a detached exec: it runs on when the host goes away, until it
        exits or the container stops. Its output is appended to ``log_path`` (created 0600,
        its folders 0700), else discarded. A missing program exits with status 127 (and says
        so in the log).

        Raises:
            SandboxGone: the container is gone or stopped, or the engine is unreachable.
        """
        self._check_open()
        if not argv:
            raise ValueError("argv must name a program")
        log_file = log_path or "/dev/null"
        with self._api_errors():
            created = self._api.exec_create(
                self._id, ["sh", "-c", _SPAWN_WRAPPER, "sh", log_file, *argv],
                stdout=False, stderr=False, stdin=False, tty=False,
                environment=dict(env) if env else None, workdir=cwd or self._workdir,
            )
            self._api.exec_start(created["Id"], detach=True)
        return DockerProcess(self, str(created["Id"]))

    def read_file(self, path: str) -> bytes:
        """Return a file's bytes, read through the archive API (following symlinks).

        Raises:
            FileNotFoundError: no such file.
            IsADirectoryError: ``path`` is a folder.
            SandboxGone: the container is gone or the engine is unreachable.
        """
        self._check_open()
        for _ in range(_MAX_LINKS):
            with self._api_errors(path):
                stream, stat = self._api.get_archive(self._id, path)
                data = b"".join(stream)
            mode = int((stat or {}).get("mode", 0))
            if mode & _DIR_BIT:
                raise IsADirectoryError(21, "is a folder", path)
            if not data.strip(b"\0"):  # no member: Python < 3.11's tarfile raises ValueError here
                raise FileNotFoundError(2, "empty archive", path)
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                member = tar.next()
                if member is None:
                    raise FileNotFoundError(2, "empty archive", path)
                if member.issym():
                    path = posixpath.join(posixpath.dirname(path), member.linkname)
                    continue
                extracted = tar.extractfile(member)
                if extracted is None:
                    raise FileNotFoundError(2, "not a regular file", path)
                return extracted.read()
        raise OSError(40, "too many levels of symbolic links", path)

    def _file_owner(self) -> Tuple[int, int]:
        if self._owner is None:
            result = self.exec(["sh", "-c", "id -u; id -g"], cwd="/")
            try:
                uid, gid = (int(x) for x in result.stdout.split())
            except ValueError:
                uid, gid = 0, 0
            self._owner = (uid, gid)
        return self._owner

    def write_file(self, path: str, data: bytes, *, mode: int = 0o600) -> None:
        """Write a file atomically (a temporary file in the same folder, then renamed), with
        ``mode``, owned by the container's user; missing folders are created 0700.

        Raises:
            SandboxGone: the container is gone or the engine is unreachable.
            OSError: the file cannot be written (a read-only folder, a path that is a folder).
        """
        self._check_open()
        folder, name = posixpath.split(posixpath.normpath(path))
        if not name or not folder.startswith("/"):
            raise ValueError(f"write_file needs an absolute file path, got {path!r}")
        uid, gid = self._file_owner()
        tmp_name = f".{name}.tmp-{secrets.token_hex(4)}"
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(tmp_name)
            info.size = len(data)
            info.mode = mode & 0o7777
            info.uid, info.gid = uid, gid
            info.mtime = int(time.time())
            tar.addfile(info, io.BytesIO(data))
        archive = buf.getvalue()
        try:
            with self._api_errors(folder):
                self._api.put_archive(self._id, folder, archive)
        except FileNotFoundError:
            made = self.exec(["sh", "-c", 'umask 077 && mkdir -p -- "$1"', "sh", folder], cwd="/")
            if not made.ok:
                raise OSError(f"cannot create {folder} in container {self._id[:12]}: "
                              f"{made.stderr.decode('utf-8', 'replace').strip()}") from None
            with self._api_errors(folder):
                self._api.put_archive(self._id, folder, archive)
        tmp_path = posixpath.join(folder, tmp_name)
        moved = self.exec(["mv", "-f", "--", tmp_path, posixpath.join(folder, name)], cwd="/")
        if not moved.ok:
            self.exec(["rm", "-f", "--", tmp_path], cwd="/")
            raise OSError(f"cannot write {path} in container {self._id[:12]}: "
                          f"{moved.stderr.decode('utf-8', 'replace').strip()}")

    def expose(self, port: int) -> Endpoint:
        """Return the URL at which the host reaches ``port`` inside the container.

        With ``network_mode="host"`` that is the port itself; otherwise a tunnel over the
        Docker API (:class:`~bridge_client.sandbox.docker_tunnel.Tunnel`), opened once per
        port and closed by :meth:`close`.

        Raises:
            SandboxGone: the container is gone or stopped, or the sandbox was closed.
        """
        self._check_open()
        port = int(port)
        if not 0 < port < 65536:
            raise ValueError(f"not a TCP port: {port}")
        if not self._running():
            raise SandboxGone(f"container {self._id[:12]} is gone or not running")
        if self._network_mode == "host":
            return Endpoint(f"ws://127.0.0.1:{port}/")
        with self._lock:
            self._check_open()
            tunnel = self._tunnels.get(port)
            if tunnel is None:
                tunnel = Tunnel(lambda: self._forwarder(port), f"container {self._id[:12]} port {port}")
                self._tunnels[port] = tunnel
        return Endpoint(f"ws://127.0.0.1:{tunnel.port}/")

    def _forwarder(self, port: int) -> ExecStream:
        _, sock = self._start_exec([self.python, "-c", FORWARDER, str(port)], cwd="/", env=None, stdin=True)
        return sock

    # -- lifetime ------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the tunnels and let go of the engine client; the container stays (use
        :meth:`remove` to remove it). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            tunnels = list(self._tunnels.values())
            self._tunnels.clear()
        for tunnel in tunnels:
            tunnel.close()
        if self._owns_client:
            try:
                self._client.close()
            except Exception:  # closing a client must not fail a clean-up
                pass

    def remove(self) -> None:
        """Close the sandbox and remove the container (killed first if running), with its
        anonymous volumes. A container that is already gone is fine.

        Raises:
            SandboxGone: the engine cannot be reached.
        """
        client = self._client
        owns = self._owns_client
        self._owns_client = False
        self.close()
        try:
            _remove_quietly(client, self._id)
        finally:
            if owns:
                try:
                    client.close()
                except Exception:
                    pass

    def __enter__(self) -> "DockerSandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"DockerSandbox({self._id[:12]!r}, workdir={self._workdir!r})"


def _hijacked(raw: Any) -> ExecStream:
    """The stream of an exec started with ``exec_start(socket=True)``.

    docker-py hands back the object under the HTTP response (a ``SocketIO`` on a unix socket,
    a socket over TCP or TLS); the HTTP client may already hold the first bytes of the stream
    in its read buffer, so they are taken out first (without blocking).
    """
    sock: socket.socket = getattr(raw, "_sock", raw)
    prefix = b""
    response = getattr(raw, "_response", None)
    http_response = getattr(getattr(response, "raw", None), "_fp", None)  # urllib3 -> http.client
    buffered = getattr(getattr(http_response, "fp", None), "read1", None)
    if callable(buffered):
        sock.setblocking(False)
        try:
            prefix = buffered(1 << 16) or b""
        except (BlockingIOError, OSError, ValueError):
            prefix = b""
        finally:
            sock.setblocking(True)
    sock.settimeout(None)  # not the client's request timeout: a command may be silent for long
    return ExecStream(sock, prefix)


def _remove_quietly(client: Any, container_id: str) -> None:
    docker = _docker()
    try:
        client.api.remove_container(container_id, force=True, v=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as exc:
        if exc.status_code != 409:  # 409: removal already in progress
            raise SandboxGone(
                f"cannot remove container {container_id[:12]}: {exc.explanation or exc}"
            ) from None
    except docker.errors.DockerException as exc:
        raise SandboxGone(f"cannot reach the Docker engine: {exc}") from None

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
session is released with the last session state the bridge gave
(:class:`~bridge_client.BridgeUnavailable`).
"""
from __future__ import annotations

import threading
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from ..errors import HarnessError, SandboxGone
from . import docker_exec, docker_files
from .base import Endpoint, ExecResult
from .docker_engine import Container, engine_client, load_docker, remove_quietly
from .docker_exec import DockerProcess
from .docker_tunnel import FORWARDER, ExecStream, Tunnel

__all__ = ["DockerSandbox", "DockerProcess", "LABEL", "IMAGE_LABEL"]

LABEL = "io.bridge-client.sandbox"
"""The label on every container :meth:`DockerSandbox.create` starts (value ``"1"``), so
leftovers can be found: ``docker ps -a --filter label=io.bridge-client.sandbox``."""

IMAGE_LABEL = "io.bridge-client.image"
"""The label naming the image on containers made by :meth:`DockerSandbox.for_image`."""

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
        id: the container's full id (the sandbox id, which the token is made from).
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
        self._owns_client = client is None
        self._client = engine_client(client)
        self._container = Container(self._client.api, container_id)
        self.python = python
        self._lock = threading.Lock()
        self._tunnels: Dict[int, Tunnel] = {}
        self._closed = False
        self._owner: Optional[Tuple[int, int]] = None
        try:
            with self._container.errors():
                info = self._container.api.inspect_container(container_id)
        except BaseException:
            if self._owns_client:
                self._client.close()
            raise
        self._container.id = self._id = str(info["Id"])
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
            labels: extra labels; ``LABEL`` (``io.bridge-client.sandbox``) is always set.
            python, state_root: as for the constructor.
            run_options: more keyword arguments for ``client.containers.run`` (``user``,
                ``volumes``, ``mem_limit``...).

        Returns:
            The sandbox; :meth:`remove` removes the container, :meth:`close` only lets go of it.

        Raises:
            SandboxGone: the engine cannot be reached.
            HarnessError: the image is not there, or the engine refused to start it.
        """
        docker = load_docker()
        engine = engine_client(client)
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
            remove_quietly(engine, container.id)
            if client is None:
                engine.close()
            raise HarnessError(
                f"the Docker engine could not start {image!r}: {exc.explanation or exc}"
            ) from None
        try:
            sandbox = cls(container.id, client=engine, python=python, state_root=state_root, workdir=workdir)
        except BaseException:
            remove_quietly(engine, container.id)
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
        engine = engine_client(client)
        docker = load_docker()
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

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxGone(f"DockerSandbox {self._id[:12]} was closed")

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
            HarnessError: the container has no ``/bin/sh``.
        """
        self._check_open()
        if not argv:
            raise ValueError("argv must name a program")
        return docker_exec.run(
            self._container, argv, workdir=cwd or self._workdir, env=env, timeout=timeout
        )

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
        return docker_exec.spawn(
            self._container, argv, workdir=cwd or self._workdir, env=env, log_path=log_path
        )

    def read_file(self, path: str) -> bytes:
        """Return a file's bytes, read through the archive API (following symlinks).

        Raises:
            FileNotFoundError: no such file.
            IsADirectoryError: ``path`` is a folder.
            SandboxGone: the container is gone or the engine is unreachable.
        """
        self._check_open()
        return docker_files.read_file(self._container, path)

    def read_private_file(self, path: str) -> bytes:
        """Return the bytes of a state file only the container's user can have made, checked
        from the archive's tar header (no extra call): a regular file (a symlink is refused,
        never followed; a FIFO is never opened), owned by the user commands run as, mode 0600.
        Its folder is checked by the bridge itself at start-up (it refuses a state directory
        that is a symlink, another user's or writable by others); see :doc:`security`.

        Raises:
            FileNotFoundError: no such file.
            UntrustedFile: the file fails those checks.
            SandboxGone: the container is gone or the engine is unreachable.
        """
        self._check_open()
        return docker_files.read_private_file(self._container, path, self._file_owner()[0])

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
            ValueError: ``path`` is not an absolute file path.
        """
        self._check_open()
        docker_files.write_file(
            self._container, path, data, mode=mode, owner=self._file_owner(),
            run=lambda argv: self.exec(argv, cwd="/"),
        )

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
        if not self._container.running():
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
        _, sock = self._container.start_exec(
            [self.python, "-c", FORWARDER, str(port)], workdir="/", env=None, stdin=True
        )
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
            remove_quietly(client, self._id)
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

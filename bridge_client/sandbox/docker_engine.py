"""One container as the Docker Engine API sees it, for the parts of
:class:`~bridge_client.sandbox.docker.DockerSandbox` (commands, files, the tunnel).

The docker SDK is imported here, only when a Docker sandbox is used (the ``docker`` extra).
:class:`Container` turns the engine's errors into the sandbox's: a container that is gone or
stopped is :class:`~bridge_client.SandboxGone`, a missing path ``FileNotFoundError``.
"""
from __future__ import annotations

import importlib
import socket
from contextlib import contextmanager
from typing import Any, Dict, Iterator, Mapping, Optional, Sequence, Tuple

from ..errors import HarnessError, SandboxGone
from .docker_tunnel import ExecStream

__all__ = ["Container", "load_docker", "engine_client", "remove_quietly"]


def load_docker() -> Any:
    """The ``docker`` module (untyped, so kept as ``Any``).

    Raises:
        HarnessError: the docker SDK is not installed.
    """
    try:
        return importlib.import_module("docker")
    except ImportError:
        raise HarnessError(
            "DockerSandbox needs the docker SDK for Python: pip install 'bridge-client[docker]'"
        ) from None


def engine_client(client: Any) -> Any:
    """``client`` itself, or ``docker.from_env()`` when it is ``None``.

    Raises:
        SandboxGone: the engine cannot be reached.
    """
    docker = load_docker()
    if client is not None:
        return client
    try:
        return docker.from_env()
    except docker.errors.DockerException as exc:
        raise SandboxGone(f"cannot reach the Docker engine: {exc}") from None


def remove_quietly(client: Any, container_id: str) -> None:
    """Remove a container (killed first) and its anonymous volumes; one already gone is fine.

    Raises:
        SandboxGone: the engine refused or cannot be reached.
    """
    docker = load_docker()
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


class Container:
    """A container by id, over an engine's low-level API client.

    Attributes:
        api: the ``docker.APIClient``.
        id: the container's id (the full id once :meth:`inspect` has run).
    """

    def __init__(self, api: Any, container_id: str) -> None:
        self.api = api
        self.id = container_id
        self._errors = load_docker().errors

    @property
    def short(self) -> str:
        """The id's first 12 characters, as ``docker ps`` shows it."""
        return self.id[:12]

    @contextmanager
    def errors(self, path: Optional[str] = None) -> Iterator[None]:
        """Turn the engine's errors into the sandbox's: gone container -> SandboxGone;
        a missing ``path`` -> FileNotFoundError; any other refusal -> HarnessError."""
        errors = self._errors
        try:
            yield
        except errors.NotFound as exc:
            if path is not None and self.exists():
                raise FileNotFoundError(2, f"no such file in container {self.short}", path) from None
            raise SandboxGone(f"container {self.short} is gone: {exc.explanation or exc}") from None
        except errors.APIError as exc:
            if exc.status_code == 409 or not self.running():
                raise SandboxGone(
                    f"container {self.short} is not running: {exc.explanation or exc}"
                ) from None
            raise HarnessError(f"the Docker engine refused: {exc.explanation or exc}") from None
        except (errors.DockerException, ConnectionError) as exc:
            raise SandboxGone(f"cannot reach the Docker engine: {exc}") from None
        except OSError as exc:  # requests' connection errors are OSErrors too
            if isinstance(exc, (FileNotFoundError, TimeoutError, IsADirectoryError)):
                raise
            raise SandboxGone(f"cannot reach the Docker engine: {exc}") from None

    def inspect(self) -> Optional[Dict[str, Any]]:
        """The engine's description of the container, or ``None`` when it is gone (engine
        errors are raised as they come)."""
        try:
            info: Dict[str, Any] = self.api.inspect_container(self.id)
            return info
        except self._errors.NotFound:
            return None

    def exists(self) -> bool:
        """Whether the engine still knows the container (False when it cannot be asked)."""
        try:
            return self.inspect() is not None
        except Exception:
            return False

    def running(self) -> bool:
        """Whether the container runs (False when it cannot be asked)."""
        try:
            info = self.inspect()
        except Exception:
            return False
        return bool(info and (info.get("State") or {}).get("Running"))

    def start_exec(
        self,
        argv: Sequence[str],
        *,
        workdir: str,
        env: Optional[Mapping[str, str]],
        stdin: bool = False,
    ) -> Tuple[str, ExecStream]:
        """Start ``argv`` as an exec attached to a stream (stdout and stderr multiplexed,
        stdin when asked). Returns the exec id and the stream.

        Raises:
            SandboxGone, HarnessError: as :meth:`errors`.
        """
        with self.errors():
            created = self.api.exec_create(
                self.id, list(argv), stdout=True, stderr=True, stdin=stdin, tty=False,
                environment=dict(env) if env else None, workdir=workdir,
            )
            exec_id = str(created["Id"])
            raw = self.api.exec_start(exec_id, socket=True)
        return exec_id, _hijacked(raw)

    def start_detached(
        self, argv: Sequence[str], *, workdir: str, env: Optional[Mapping[str, str]] = None
    ) -> str:
        """Start ``argv`` as an exec nobody reads; returns its exec id.

        Raises:
            SandboxGone, HarnessError: as :meth:`errors`.
        """
        with self.errors():
            created = self.api.exec_create(
                self.id, list(argv), stdout=False, stderr=False, stdin=False, tty=False,
                environment=dict(env) if env else None, workdir=workdir,
            )
            self.api.exec_start(created["Id"], detach=True)
        return str(created["Id"])

    def exec_inspect(self, exec_id: str) -> Dict[str, Any]:
        """The engine's description of an exec (``Running``, ``ExitCode``).

        Raises:
            SandboxGone, HarnessError: as :meth:`errors`.
        """
        with self.errors():
            info: Dict[str, Any] = self.api.exec_inspect(exec_id)
        return info


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

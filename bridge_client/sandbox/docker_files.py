"""Files in a container through the engine's archive endpoints (one-member tar archives), for
:class:`~bridge_client.sandbox.docker.DockerSandbox`: nothing needs to be installed in the
container for them, and a container without network is fine.
"""
from __future__ import annotations

import io
import posixpath
import secrets
import tarfile
import time
from typing import Callable, Sequence, Tuple

from ..errors import UntrustedFile
from .base import ExecResult
from .docker_engine import Container

__all__ = ["read_file", "read_private_file", "write_file"]

_DIR_BIT = 1 << 31  # Go's os.ModeDir in the archive stat header
_MAX_LINKS = 8

Exec = Callable[[Sequence[str]], ExecResult]
"""Runs a command in the container's ``/`` and returns its result."""


def read_file(container: Container, path: str) -> bytes:
    """A file's bytes, following symlinks (see :meth:`DockerSandbox.read_file`).

    Raises:
        FileNotFoundError: no such file.
        IsADirectoryError: ``path`` is a folder.
        OSError: too many levels of symbolic links.
        SandboxGone: the container is gone or the engine is unreachable.
    """
    for _ in range(_MAX_LINKS):
        with container.errors(path):
            stream, stat = container.api.get_archive(container.id, path)
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


def read_private_file(container: Container, path: str, uid: int) -> bytes:
    """A state file's bytes, checked from the archive's tar header: a regular file (never a
    link, never a FIFO), owned by ``uid``, mode 0600 or narrower (see
    :meth:`DockerSandbox.read_private_file`).

    Raises:
        FileNotFoundError: no such file.
        UntrustedFile: the file fails those checks.
        SandboxGone: the container is gone or the engine is unreachable.
    """
    with container.errors(path):
        stream, stat = container.api.get_archive(container.id, path)
        if int((stat or {}).get("mode", 0)) & _DIR_BIT:
            raise UntrustedFile(f"{path} is not a regular file (a folder); remove it", path)
        data = b"".join(stream)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        member = tar.next()
        if member is None:
            raise FileNotFoundError(2, "empty archive", path)
        if member.issym() or member.islnk():
            raise UntrustedFile(f"{path} is a link; refusing to follow it (remove it)", path)
        if not member.isfile():
            raise UntrustedFile(
                f"{path} is not a regular file (a FIFO, socket or device); remove it", path
            )
        if member.uid != uid:
            raise UntrustedFile(f"the file {path} belongs to user id {member.uid}, not to the "
                                f"container's user ({uid}); refusing it", path)
        if member.mode & 0o077:
            raise UntrustedFile(f"the file {path} is open to others (mode {member.mode & 0o777:o}); "
                                f"run: chmod 600 {path}", path)
        extracted = tar.extractfile(member)
        if extracted is None:  # pragma: no cover - isfile() said it is one
            raise FileNotFoundError(2, "not a regular file", path)
        return extracted.read()


def write_file(
    container: Container, path: str, data: bytes, *, mode: int, owner: Tuple[int, int], run: Exec
) -> None:
    """Write a file atomically: a temporary file in the same folder, then renamed (see
    :meth:`DockerSandbox.write_file`). ``owner`` is ``(uid, gid)``; ``run`` runs the
    ``mkdir``/``mv`` it needs.

    Raises:
        ValueError: ``path`` is not an absolute file path.
        SandboxGone: the container is gone or the engine is unreachable.
        OSError: the file cannot be written.
    """
    folder, name = posixpath.split(posixpath.normpath(path))
    if not name or not folder.startswith("/"):
        raise ValueError(f"write_file needs an absolute file path, got {path!r}")
    tmp_name = f".{name}.tmp-{secrets.token_hex(4)}"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(tmp_name)
        info.size = len(data)
        info.mode = mode & 0o7777
        info.uid, info.gid = owner
        info.mtime = int(time.time())
        tar.addfile(info, io.BytesIO(data))
    archive = buf.getvalue()
    if len(archive) > _EARLY_ANSWER_BYTES:
        # The engine answers a missing folder's 404 before it reads the upload, then closes:
        # past what the socket buffers hold, the client may see the connection reset instead
        # of the 404. A big archive's folder is made first (one exec more).
        _make_folder(container, folder, run)
    try:
        with container.errors(folder):
            container.api.put_archive(container.id, folder, archive)
    except FileNotFoundError:
        _make_folder(container, folder, run)
        with container.errors(folder):
            container.api.put_archive(container.id, folder, archive)
    tmp_path = posixpath.join(folder, tmp_name)
    moved = run(["mv", "-f", "--", tmp_path, posixpath.join(folder, name)])
    if not moved.ok:
        run(["rm", "-f", "--", tmp_path])
        raise OSError(f"cannot write {path} in container {container.short}: "
                      f"{moved.stderr.decode('utf-8', 'replace').strip()}")


_EARLY_ANSWER_BYTES = 64 * 1024
"""An archive up to this size reaches the engine whole before its answer (socket buffers)."""


def _make_folder(container: Container, folder: str, run: Exec) -> None:
    """``mkdir -p`` the folder (private: umask 077).

    Raises:
        OSError: it cannot be made.
    """
    made = run(["sh", "-c", 'umask 077 && mkdir -p -- "$1"', "sh", folder])
    if not made.ok:
        raise OSError(f"cannot create {folder} in container {container.short}: "
                      f"{made.stderr.decode('utf-8', 'replace').strip()}")

"""Which sandbox a command works in: ``--sandbox`` (a folder, ``docker:IMAGE``, or an
``ssh://``, ``docker+tcp://``, ``docker+ssh://`` URL) to a :class:`~bridge_client.Sandbox`, and
how that sandbox is named in a saved turn state and a printed command.
"""
from __future__ import annotations

import os
from typing import Optional, cast

from ..sandbox.base import Sandbox
from ..sandbox.local import LocalSandbox
from ..sandbox.urls import is_sandbox_url, sandbox_from_url
from .exits import UsageError

__all__ = ["open_sandbox", "sandbox_label"]

_DOCKER_PREFIX = "docker:"


def open_sandbox(folder: Optional[str], *, removed_ok: bool = False) -> Sandbox:
    """The sandbox ``--sandbox`` names. ``DIR`` -> a LocalSandbox; ``docker:IMAGE`` -> the
    running container made earlier for IMAGE, or a new one (see :doc:`docker`); an ``ssh://``,
    ``docker+tcp://`` or ``docker+ssh://`` URL -> a sandbox on another machine (see
    :doc:`scaling`).

    With ``removed_ok``, a folder removed while its bridges may still run gives a
    :class:`~bridge_client.cli.bridge_dirs.RemovedFolder` (for ``bridges`` and ``stop``).

    Raises:
        UsageError: the folder or URL is not one.
    """
    if is_sandbox_url(folder):
        try:
            return sandbox_from_url(str(folder))
        except (ValueError, FileNotFoundError, NotADirectoryError) as exc:
            raise UsageError(f"--sandbox {folder}: {exc}") from None
    if folder and folder.startswith(_DOCKER_PREFIX):
        image = folder[len(_DOCKER_PREFIX):]
        if not image:
            raise UsageError("--sandbox docker:IMAGE needs an image name")
        from ..sandbox.docker import DockerSandbox  # the docker extra: imported only when used

        return DockerSandbox.for_image(image)
    try:
        return LocalSandbox(folder or ".")
    except FileNotFoundError as exc:
        if removed_ok and folder:
            from .bridge_dirs import removed_folder

            removed = removed_folder(folder)
            if removed is not None:
                return cast(Sandbox, removed)
        raise UsageError(str(exc)) from None
    except NotADirectoryError as exc:
        raise UsageError(str(exc)) from None


def sandbox_label(folder: Optional[str]) -> str:
    """How a sandbox is named in a saved turn state and a printed command: ``docker:IMAGE`` as
    given, a folder as its absolute real path."""
    if (folder and folder.startswith(_DOCKER_PREFIX)) or is_sandbox_url(folder):
        return str(folder)
    return os.path.realpath(folder or ".")

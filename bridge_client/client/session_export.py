"""A session's export file, on the host: asked of the bridge (``ExportSession``) and written
atomically, and read back and checked (see :doc:`portable-sessions`)."""
from __future__ import annotations

import os
from typing import Any, Dict

from ..private_files import write_whole
from ..wire import portable

__all__ = ["write_export", "read_export"]


def write_export(path: "str | os.PathLike[str]", body: Dict[str, Any]) -> str:
    """Write the export file of ``body`` at ``path`` atomically: a temporary file in the same
    folder (mode 0600: it holds prompts and output), flushed to disk, then renamed over
    ``path``; a failure at any point leaves ``path`` as it was and removes the temporary file.

    Returns:
        The absolute path written.

    Raises:
        OSError: the folder cannot be written (``FileNotFoundError`` when it does not exist).
    """
    target = os.path.abspath(os.fspath(path))
    folder = os.path.dirname(target)
    data = portable.encode_export(body)
    write_whole(target, data)
    try:
        dir_fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return target
    try:
        os.fsync(dir_fd)  # the rename itself survives a power loss
    except OSError:
        pass
    finally:
        os.close(dir_fd)
    return target


def read_export(path: "str | os.PathLike[str]") -> Dict[str, Any]:
    """Read and check an export file; return its body.

    Raises:
        ExportDamaged: damaged, truncated or not an export file.
        ExportUnsupported: of a newer format version.
        OSError: it cannot be read (``FileNotFoundError``).
    """
    name = os.fspath(path)
    with open(name, "rb") as f:
        data = f.read()
    return portable.decode_export(data, name)

"""The ACP client's file methods, as the ``acp`` driver (:mod:`bridge_client.drivers.acp`)
serves them to its agent: ``fs/read_text_file`` (``line`` and ``limit`` select lines) and
``fs/write_text_file`` on the sandbox's files, relative paths from the workspace (a write goes to
a temporary file renamed into place, so a reader never sees half of it).
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, Dict

from .acp_rpc import INTERNAL_ERROR, INVALID_PARAMS, RESOURCE_NOT_FOUND, RpcError

__all__ = ["serve_fs"]


def serve_fs(method: str, params: Dict[str, Any]) -> Any:
    """Serve ``fs/read_text_file`` or ``fs/write_text_file``. Raises :class:`RpcError`."""
    path = params.get("path")
    if not isinstance(path, str) or not path:
        raise RpcError(INVALID_PARAMS, "path must be a non-empty string")
    path = os.path.join(os.getcwd(), path)  # an absolute path stays as it is
    try:
        if method == "fs/read_text_file":
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
            line, limit = params.get("line"), params.get("limit")
            if isinstance(line, int) or isinstance(limit, int):
                lines = text.splitlines(keepends=True)
                start = max(line - 1, 0) if isinstance(line, int) else 0
                end = start + limit if isinstance(limit, int) and limit >= 0 else None
                text = "".join(lines[start:end])
            return {"content": text}
        content = params.get("content")
        if not isinstance(content, str):
            raise RpcError(INVALID_PARAMS, "content must be a string")
        folder = os.path.dirname(path) or "."
        os.makedirs(folder, exist_ok=True)
        try:
            mode = os.stat(path).st_mode & 0o7777  # an existing file keeps its mode
        except FileNotFoundError:
            mode = 0o644
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".acp-write-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(content)
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
        return None
    except FileNotFoundError:
        raise RpcError(RESOURCE_NOT_FOUND, f"no such file: {path}") from None
    except OSError as exc:
        raise RpcError(INTERNAL_ERROR, f"{path}: {exc.strerror or exc}") from None

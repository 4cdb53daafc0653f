"""SFTP helpers of the SSH sandbox: folders made 0700, files created with their mode."""
from __future__ import annotations

import posixpath
from typing import Any, Optional

__all__ = ["is_dir", "make_dirs", "create_private"]


def is_dir(mode: Optional[int]) -> bool:
    """Whether an SFTP ``st_mode`` is a folder's."""
    return mode is not None and (mode & 0o170000) == 0o040000


def make_dirs(sftp: Any, folder: str) -> None:
    """Create ``folder`` and its missing parents, each 0700."""
    missing = []
    current = folder
    while current not in ("", "/"):
        try:
            attrs = sftp.stat(current)
        except FileNotFoundError:
            missing.append(current)
            current = posixpath.dirname(current)
            continue
        if not is_dir(attrs.st_mode):
            raise NotADirectoryError(20, "not a folder", current)
        break
    for path in reversed(missing):
        try:
            sftp.mkdir(path, 0o700)
        except OSError:
            if not is_dir(sftp.stat(path).st_mode):  # made meanwhile by another writer?
                raise
            continue
        sftp.chmod(path, 0o700)


def create_private(sftp: Any, path: str, mode: int) -> Any:
    """Open a new file for writing whose permissions are ``mode`` from its creation (an
    SFTP open with attributes; paramiko's ``open`` sends none, so the file would be readable
    by others, under the server's umask, until a chmod)."""
    from paramiko import SFTPAttributes, SFTPFile
    from paramiko.sftp import CMD_HANDLE, CMD_OPEN, SFTP_FLAG_CREATE, SFTP_FLAG_EXCL, SFTP_FLAG_WRITE

    try:
        attrs = SFTPAttributes()
        attrs.st_mode = mode
        flags = SFTP_FLAG_WRITE | SFTP_FLAG_CREATE | SFTP_FLAG_EXCL
        kind, msg = sftp._request(CMD_OPEN, sftp._adjust_cwd(path), flags, attrs)
        if kind != CMD_HANDLE:
            raise OSError(f"the SFTP server did not open {path}")
        return SFTPFile(sftp, msg.get_binary(), "wb", -1)
    except AttributeError:  # a paramiko without these internals: open, then chmod at once
        f = sftp.open(path, "xb")
        sftp.chmod(path, mode)
        return f

"""The notice pipe a launcher may give the bridge (``BRIDGE_CLIENT_NOTICE_FD``): one line,
``listening VERSION`` or ``locked VERSION``, so that the launcher need not poll for the
listening file (see :doc:`protocol`, "Writing a bridge: the state directory").
"""
from __future__ import annotations

import os
from typing import Optional

__all__ = ["notice_fd", "notify", "package_version"]

_NOTICE_FD_ENV = "BRIDGE_CLIENT_NOTICE_FD"  # (sandbox.base.NOTICE_FD_ENV, not imported here)


def notice_fd() -> Optional[int]:
    """The notice pipe the launcher gave (``BRIDGE_CLIENT_NOTICE_FD``), kept from children."""
    text = os.environ.get(_NOTICE_FD_ENV, "")
    try:
        fd = int(text)
        os.fstat(fd)
    except (ValueError, OSError):
        return None
    if fd <= 2:
        return None  # never our own stdin, stdout or stderr
    try:
        os.set_inheritable(fd, False)
    except OSError:
        return None
    return fd


def notify(fd: Optional[int], line: str) -> None:
    """Write ``line`` to the notice pipe and close it (the launcher may be gone: no matter)."""
    if fd is None:
        return
    try:
        if line:
            os.write(fd, (line + "\n").encode("utf-8"))
    except OSError:
        pass
    finally:
        try:
            os.close(fd)
        except OSError:
            pass


def package_version() -> str:
    """This package's version, for the notice: the launcher trusts the bridge program it
    launched without a template check only when it is the host's own version."""
    from .. import __version__

    return __version__

"""Where this user's bridge_client files live, and the default secret for tokens.

Layout (``BRIDGE_CLIENT_HOME`` overrides the root)::

    $XDG_STATE_HOME/bridge-client/          (default ~/.local/state/bridge-client)
        secret                              the per-user secret for tokens, mode 0600
        sandboxes/<sandbox id>/bridges/...  LocalSandbox state roots
"""
from __future__ import annotations

import os
import secrets
import time

from .state_dir.identity import make_private_dirs
from .errors import HarnessError, UntrustedFile
from .private_files import read_private
from .redacted import Redacted

__all__ = ["HOME_ENV", "SECRET_ENV", "user_home", "default_secret"]

HOME_ENV = "BRIDGE_CLIENT_HOME"
"""Environment variable naming the folder for this user's bridge_client files."""

SECRET_ENV = "BRIDGE_CLIENT_SECRET"
"""Environment variable holding the secret every host shares (overrides the secret file)."""


def user_home() -> str:
    """Return this user's bridge_client folder (not created here).

    ``$BRIDGE_CLIENT_HOME``, else ``$XDG_STATE_HOME/bridge-client``, else
    ``~/.local/state/bridge-client``.
    """
    explicit = os.environ.get(HOME_ENV)
    if explicit:
        return os.path.abspath(explicit)
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "bridge-client")


def default_secret() -> Redacted:
    """Return the secret for :func:`~bridge_client.redacted.hmac_token`.

    ``$BRIDGE_CLIENT_SECRET`` when set; otherwise the file ``<user_home>/secret``, created
    once with 32 random bytes (hex) and mode 0600. Creation is exclusive, so two processes
    that start at once agree on one secret.

    The home folder must be this user's, not a symlink, and writable by nobody else; the
    secret a regular file of this user with mode 0600 (anyone who can read it can derive
    every token; anyone who could write it could choose them). See :doc:`security`.

    Raises:
        UntrustedFile: the home folder or the secret file is a symlink, another user's, or
            open to others (the message says how to fix it).
        HarnessError: the secret file is empty.
        OSError: the folder cannot be created or read (of the same type, e.g.
            PermissionError; the message names the state directory and the variables that
            set it).
    """
    from_env = os.environ.get(SECRET_ENV)
    if from_env:
        return Redacted(from_env)
    home = user_home()
    try:
        return _secret_in(home)
    except UntrustedFile:
        raise
    except OSError as exc:
        if exc.errno is None:
            raise
        text = f"{STATE_DIR_HINT.format(home=home)}: {exc.strerror}"
        raise type(exc)(exc.errno, text, exc.filename) from None


STATE_DIR_HINT = "cannot use the state directory {home} (set by BRIDGE_CLIENT_HOME, else XDG_STATE_HOME)"
"""How an OSError about the state directory begins (``home=`` the folder)."""


def _secret_in(home: str) -> Redacted:
    make_private_dirs(home)
    path = os.path.join(home, "secret")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        # Readers that race with this write see at worst an empty file and wait below.
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
            f.flush()
            os.fsync(f.fileno())
    deadline = time.monotonic() + 2.0
    while True:
        raw = read_private(path, private=True)  # no symlink, no FIFO, ours, mode 0600
        try:
            value = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise HarnessError(f"{path} is not UTF-8 text; remove it to make a new secret") from None
        if value:
            return Redacted(value)
        if time.monotonic() > deadline:
            raise HarnessError(f"{path} is empty; remove it to make a new secret")
        time.sleep(0.01)  # another process created it a moment ago and is writing it

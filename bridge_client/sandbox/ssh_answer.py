"""What answers on an SSH sandbox's port when it is not an SSH server, and where paramiko's
log records go.

A first connect reads the server's first bytes through :class:`BannerTap`; when no SSH
banner came, :func:`no_ssh` says what happened instead: something else answered (its first
line is quoted), the port accepted and said nothing, or it closed the connection without a
word. paramiko's records go to the :data:`PARAMIKO_LOGGER` logger, lowered to ``DEBUG`` (see
:doc:`logging`): the error the sandbox raises says what failed.
"""
from __future__ import annotations

import logging
import socket
from typing import Any

__all__ = ["PARAMIKO_LOGGER", "BannerTap", "NoSSH", "no_ssh"]

PARAMIKO_LOGGER = "bridge_client.sandbox.ssh.paramiko"
"""The logger paramiko's records go to (its SFTP client's to ``<this>.sftp``), at DEBUG."""


class _AtDebug(logging.Filter):
    """paramiko logs, at ERROR and with tracebacks, failures this module handles (a dropped
    connection it makes again, a port that does not speak SSH): its records are lowered to
    DEBUG and dropped unless DEBUG is on for their logger, so they never reach a handler
    (or Python's last-resort handler) that did not ask for them."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


for _name in (PARAMIKO_LOGGER, PARAMIKO_LOGGER + ".sftp"):
    logging.getLogger(_name).addFilter(_AtDebug())


class BannerTap:
    """A connected socket, given to paramiko in its place, that keeps the first bytes the
    server sends, to tell the user what answered when it was not SSH. Every other attribute
    is the socket's own.

    Args:
        sock: the connected TCP socket.

    Attributes:
        heard: the first bytes received (at most 512).
        eof: whether the server closed its end (a ``recv`` gave no bytes).
    """

    _KEEP = 512

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.heard = b""
        self.eof = False

    def recv(self, size: int, *flags: int) -> bytes:
        """``socket.recv``, noting what came (raises what the socket raises)."""
        data = self._sock.recv(size, *flags)
        if not data:
            self.eof = True
        elif len(self.heard) < self._KEEP:
            self.heard += data[: self._KEEP - len(self.heard)]
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class NoSSH(Exception):
    """The TCP connection was made but no SSH server answered on it.

    Attributes:
        final: a retry cannot mend it on a first connect (something else answers, or
            nothing does within the timeout).
    """

    def __init__(self, message: str, final: bool) -> None:
        super().__init__(message)
        self.final = final


def _first_line(heard: bytes) -> str:
    """The first non-empty line of what a server sent, for a message (at most 60 characters)."""
    lines = [line.strip() for line in heard.splitlines() if line.strip()]
    line = (lines[0] if lines else heard).decode("utf-8", "replace")
    return line if len(line) <= 60 else line[:60] + "\u2026"


def no_ssh(host: str, port: int, name: str, tap: BannerTap, timeout: float) -> NoSSH:
    """What to say when the TCP connection to ``host:port`` was made but no SSH banner came
    on it within ``timeout`` seconds, from what ``tap`` heard; ``name`` (``user@host:port``)
    is the target as the user wrote it.

    Returns:
        A :class:`NoSSH`: final when something other than SSH answered or nothing came in
        ``timeout`` seconds; not final when the server closed without a word (an SSH server
        that is starting or at its bound of unauthenticated connections does so).
    """
    where = f"{host}:{port}"
    if tap.heard:
        return NoSSH(
            f"{where} answers, but not with SSH: got {_first_line(tap.heard)!r} "
            f"(check the host and port of {name})", final=True,
        )
    if tap.eof:  # a forwarder whose sshd is not up yet, an sshd at MaxStartups: worth a retry
        return NoSSH(
            f"{where} accepts connections but closes them without a word: no SSH server "
            f"answers there yet (check the host and port of {name})", final=False,
        )
    return NoSSH(
        f"{where} accepts connections but says nothing ({timeout:g} s without an answer): "
        f"no SSH server answers there (check the host and port of {name})", final=True,
    )

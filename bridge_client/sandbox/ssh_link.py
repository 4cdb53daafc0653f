"""One SSH connection per (host, port, user) in a host process, shared and reconnected.

:class:`SSHLink` holds a paramiko transport, the SFTP client on it and the port forwarders
that go over it. Every sandbox of the same host, port and user in this process uses the same
link (:func:`link_for`), so the sessions of a host process share one TCP connection and one
authentication. When the transport drops (the network, the server, a killed sshd child), the
next operation connects again, with backoff, for up to ``reconnect_window`` seconds; only
then is the host :class:`~bridge_client.errors.SandboxGone`. What was in flight on the old
transport fails: the session layer resends its requests and reads on from their offsets
(see :doc:`resilience`).

Host keys are checked against ``known_hosts`` (the user's ``~/.ssh/known_hosts`` by default)
and an unknown or changed key is refused, never added. See :doc:`scaling`.

A first connect that cannot succeed fails at once with what happened: the port refuses the
connection, or something other than SSH answers on it (its first line is quoted), or it
accepts the connection and says nothing. paramiko's own log records go to the
``bridge_client.sandbox.ssh.paramiko`` logger at ``DEBUG`` (see :doc:`logging`).
"""
from __future__ import annotations

import errno
import importlib
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, Optional, Tuple, TypeVar

from contextlib import contextmanager

from ..errors import HarnessError, SandboxGone, Unauthorized, UntrustedEndpoint
from .ssh_answer import PARAMIKO_LOGGER, BannerTap, NoSSH, no_ssh

__all__ = ["SSHTarget", "SSHLink", "link_for", "release", "paramiko_module"]

log = logging.getLogger("bridge_client")

T = TypeVar("T")

_FIRST_PAUSE = 0.05  # seconds between reconnect attempts, doubling...
_MAX_PAUSE = 1.0  # ...up to this


def paramiko_module() -> Any:
    """Import paramiko (the ``ssh`` extra), or say how to install it.

    Raises:
        HarnessError: paramiko is not installed.
    """
    try:
        return importlib.import_module("paramiko")  # untyped: kept as Any
    except ImportError:
        raise HarnessError("SSHSandbox needs paramiko: pip install 'bridge-client[ssh]'") from None


@dataclass(frozen=True)
class SSHTarget:
    """How to reach and log in to one SSH server.

    Attributes:
        host: the host name or address.
        port: the TCP port (22).
        user: the user to log in as.
        key_filename: a private key file; ``None`` uses the SSH agent and ``~/.ssh/id_*``.
        allow_agent: whether keys of a running SSH agent may be used.
        known_hosts: the known-hosts file the server's key must be in (default
            ``~/.ssh/known_hosts``).
        connect_timeout: seconds for the TCP connect, the banner and the authentication.
        reconnect_window: seconds during which a dropped connection is made again before
            the host counts as gone.
        keepalive: seconds between SSH keepalive messages (0: none).
        timeout: seconds an SFTP request may wait for its answer before the connection
            counts as dropped.
    """

    host: str
    port: int = 22
    user: str = ""
    key_filename: Optional[str] = None
    allow_agent: bool = True
    known_hosts: Optional[str] = None
    connect_timeout: float = 10.0
    reconnect_window: float = 30.0
    keepalive: float = 15.0
    timeout: float = 10.0

    @property
    def key(self) -> Tuple[str, int, str]:
        """``(host, port, user)``: what the pool shares a link by."""
        return (self.host, self.port, self.user)

    @property
    def name(self) -> str:
        """``user@host:port``, for messages."""
        return f"{self.user}@{self.host}:{self.port}"


class _Refused(Exception):
    """The server's host key is unknown (raised by our missing-host-key policy)."""


def _reject_policy(paramiko: Any) -> Any:
    class _Reject(paramiko.MissingHostKeyPolicy):  # type: ignore[misc]
        def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
            raise _Refused(f"{hostname} ({key.get_name()}) is not in known_hosts")

    return _Reject()


class SSHLink:
    """A shared, reconnecting SSH connection (see the module's docs).

    Args:
        target: where to connect and how to log in.

    Use :meth:`transport` for channels, :meth:`sftp` for files; both connect again when the
    connection dropped. Thread-safe. :meth:`close` ends it for every user.
    """

    def __init__(self, target: SSHTarget) -> None:
        self.target = target
        self._paramiko = paramiko_module()
        self._lock = threading.Lock()  # guards _client and the (re)connect
        self._sftp_lock = threading.Lock()  # one SFTP request at a time on the shared client
        self._client: Any = None
        self._sftp: Any = None
        self._sftp_of: Any = None  # the transport _sftp runs on
        self._ever = False
        self._gone = False  # the last reconnect ran out its window: the next one tries once
        self._closed = False
        self.refs = 0
        self.pid = os.getpid()
        self.extras: Dict[Any, Any] = {}  # forwarders by remote port (ssh_forward)

    # -- connecting ---------------------------------------------------------------------------

    def _connect_once(self, timeout: float) -> Any:
        p = self._paramiko
        t = self.target
        sock = socket.create_connection((t.host, t.port), timeout)  # refused: ConnectionRefusedError
        tap = BannerTap(sock)
        client = p.SSHClient()
        client.set_log_channel(PARAMIKO_LOGGER)
        try:
            client.load_system_host_keys(t.known_hosts)  # read only: nothing is ever saved
            client.set_missing_host_key_policy(_reject_policy(p))
            client.connect(
                t.host, port=t.port, username=t.user, key_filename=t.key_filename,
                allow_agent=t.allow_agent, look_for_keys=t.key_filename is None,
                timeout=timeout, banner_timeout=timeout, auth_timeout=timeout,
                channel_timeout=timeout, sock=tap,
            )
        except Exception:
            banner = getattr(client.get_transport(), "remote_version", "")
            client.close()
            sock.close()
            if not banner:
                raise no_ssh(t.host, t.port, t.name, tap, timeout) from None
            raise
        except BaseException:
            client.close()
            sock.close()
            raise
        transport = client.get_transport()
        try:  # small RPC frames: without it Nagle and delayed ACKs add ~40 ms per exchange
            transport.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except (OSError, AttributeError):
            pass
        if t.keepalive > 0:
            transport.set_keepalive(max(1, int(t.keepalive)))
        return client

    def _final_error(self, exc: BaseException) -> Optional[HarnessError]:
        """The error for a failure that a retry cannot mend (a key or the credentials)."""
        p = self._paramiko
        name = self.target.name
        if isinstance(exc, (_Refused, p.BadHostKeyException)):
            return UntrustedEndpoint(f"SSH host key of {name} refused: {exc}")
        if isinstance(exc, p.AuthenticationException):
            return Unauthorized(f"SSH server {name} refused the credentials: {exc}")
        return None

    def _refused(self, exc: BaseException) -> bool:
        """Whether every address of the host refused the TCP connection: on a first connect
        that is a wrong host or port, not a drop to wait out."""
        if isinstance(exc, ConnectionRefusedError):
            return True
        errors = getattr(exc, "errors", None)  # paramiko's NoValidConnectionsError: per address
        if not isinstance(errors, dict) or not errors:
            return False
        return all(
            isinstance(e, ConnectionRefusedError) or getattr(e, "errno", None) == errno.ECONNREFUSED
            for e in errors.values()
        )

    def transport(self, deadline: Optional[float] = None) -> Any:
        """The live transport, connecting again when it dropped.

        Args:
            deadline: a ``time.monotonic()`` instant until which a failed connect is tried
                again (default: ``reconnect_window`` from now). Once a reconnect has run out
                its window, later calls try once until a connect succeeds again.

        Raises:
            UntrustedEndpoint: the server's host key is not in known_hosts or differs (the
                first connect only; later it is ``SandboxGone``).
            Unauthorized: the server refused the credentials (likewise).
            SandboxGone: the host did not answer by the deadline, the link was closed, or
                (the first connect only, not retried) nothing listens on the port, something
                other than SSH answers on it, or it accepts and says nothing for the connect
                timeout.
        """
        if deadline is None:
            deadline = time.monotonic() + self.target.reconnect_window
        with self._lock:
            if self._closed:
                raise SandboxGone(f"the SSH link to {self.target.name} was closed")
            client = self._client
            transport = client.get_transport() if client is not None else None
            if transport is not None and transport.is_active():
                return transport
            if client is not None:
                self._client = None
                client.close()
            once = self._gone  # found gone already: one more try, not another whole window
            pause = _FIRST_PAUSE
            while True:
                left = deadline - time.monotonic()
                try:
                    self._client = self._connect_once(max(0.5, min(self.target.connect_timeout, left)))
                    if self._ever:
                        log.debug("ssh %s: connected again", self.target.name)
                    self._ever = True
                    self._gone = False
                    return self._client.get_transport()
                except Exception as exc:
                    final = self._final_error(exc)
                    if final is not None:
                        if not self._ever:
                            raise final from None
                        raise SandboxGone(str(final)) from None
                    if not self._ever and isinstance(exc, NoSSH) and exc.final:
                        raise SandboxGone(str(exc)) from None
                    if not self._ever and self._refused(exc):
                        raise SandboxGone(
                            f"nothing listens for SSH at {self.target.name} (connection refused): "
                            "check the host and port"
                        ) from None
                    if once or time.monotonic() + pause >= deadline:
                        self._gone = True
                        if isinstance(exc, NoSSH):
                            raise SandboxGone(str(exc)) from None
                        raise SandboxGone(
                            f"the SSH host {self.target.name} does not answer: {exc or type(exc).__name__}"
                        ) from None
                    log.debug("ssh %s: connect failed (%s); again in %.2f s", self.target.name, exc, pause)
                time.sleep(pause)
                pause = min(pause * 2, _MAX_PAUSE)

    def drop(self, transport: Any) -> None:
        """Close ``transport`` if it is still the current one (it hung or broke), so the next
        use connects again."""
        with self._lock:
            client = self._client
            if client is not None and client.get_transport() is transport:
                self._client = None
                client.close()

    def alive(self, transport: Any) -> bool:
        """Whether ``transport`` is still the current, active one."""
        return bool(transport.is_active()) and self._client is not None and (
            self._client.get_transport() is transport
        )

    # -- SFTP ---------------------------------------------------------------------------------

    def _sftp_on(self, transport: Any) -> Any:
        # (caller holds _sftp_lock)
        if self._sftp is not None and self._sftp_of is transport and not self._sftp.sock.closed:
            return self._sftp
        if self._sftp is not None:
            try:
                self._sftp.close()
            except Exception:
                pass
        sftp = self._paramiko.SFTPClient.from_transport(transport)
        if sftp is None:
            raise OSError(f"the SSH server {self.target.name} has no SFTP subsystem")
        sftp.get_channel().settimeout(self.target.timeout)
        self._sftp, self._sftp_of = sftp, transport
        return sftp

    def sftp_call(self, fn: Callable[[Any], T], what: str) -> T:
        """Run ``fn(sftp_client)``, an idempotent file operation, and return its value; when
        the connection drops (or an answer takes longer than ``timeout``) it is run again on a
        new connection, within ``reconnect_window``.

        Raises:
            OSError: what ``fn`` raised for the file itself (``FileNotFoundError``...).
            SandboxGone: the host did not answer within the window.
        """
        deadline = time.monotonic() + self.target.reconnect_window
        while True:
            transport = self.transport(deadline)
            with self._sftp_lock:
                try:
                    return fn(self._sftp_on(transport))
                except (OSError, EOFError, self._paramiko.SSHException) as exc:
                    hung = isinstance(exc, socket.timeout)
                    if not hung and self.alive(transport):
                        if isinstance(exc, OSError):
                            raise  # about the file, not the connection
                        raise OSError(f"{what}: {exc}") from None
                    self._sftp = None
                    log.debug("ssh %s: %s: connection lost (%s)", self.target.name, what, exc)
            self.drop(transport)
            if time.monotonic() >= deadline:
                raise SandboxGone(f"the SSH host {self.target.name} stopped answering during {what}")

    @contextmanager
    def session_channel(self, deadline: Optional[float] = None) -> Iterator[Any]:
        """A new ``session`` channel (for one command), closed on exit.

        Raises:
            SandboxGone: the host did not answer by the deadline.
        """
        transport = self.transport(deadline)
        try:
            chan = transport.open_session(timeout=self.target.connect_timeout)
        except Exception as exc:
            self.drop(transport)
            transport = self.transport(deadline)
            try:
                chan = transport.open_session(timeout=self.target.connect_timeout)
            except Exception:
                raise SandboxGone(f"the SSH host {self.target.name} refuses a channel: {exc}") from None
        try:
            yield chan
        finally:
            chan.close()

    # -- lifetime -----------------------------------------------------------------------------

    def close(self) -> None:
        """Close the forwarders, the SFTP client and the transport. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            client, self._client = self._client, None
            extras = list(self.extras.values())
            self.extras.clear()
        for extra in extras:
            extra.close()
        with self._sftp_lock:
            if self._sftp is not None:
                try:
                    self._sftp.close()
                except Exception:
                    pass
                self._sftp = None
        if client is not None:
            client.close()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    def __repr__(self) -> str:
        return f"SSHLink({self.target.name}, refs={self.refs}{', closed' if self._closed else ''})"


_pool: Dict[Tuple[int, str, int, str], SSHLink] = {}
_pool_lock = threading.Lock()


def link_for(target: SSHTarget) -> SSHLink:
    """The link of this process for ``target``'s (host, port, user), made when there is none
    (its first connect happens on first use). The caller counts itself in ``refs`` and
    calls :func:`release` when done. A forked child gets links of its own."""
    key = (os.getpid(), *target.key)
    with _pool_lock:
        link = _pool.get(key)
        if link is None or link.closed:
            link = SSHLink(target)
            _pool[key] = link
        link.refs += 1
        return link


def release(link: SSHLink) -> None:
    """Count one user less; the last one closes the link."""
    with _pool_lock:
        link.refs -= 1
        if link.refs > 0:
            return
        key = (link.pid, *link.target.key)
        if _pool.get(key) is link:
            del _pool[key]
    link.close()

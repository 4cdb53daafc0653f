"""Sandboxes named by URL, as the CLI's ``--sandbox`` takes them (:doc:`cli`, :doc:`scaling`).

=============================================  ===============================================
``ssh://[USER@]HOST[:PORT]/PATH``              :class:`~bridge_client.sandbox.ssh.SSHSandbox` on
                                               the folder ``/PATH`` (``/~/PATH``: in the remote
                                               user's home); ``?key=FILE&known_hosts=FILE``
                                               name a private key and a known-hosts file
``docker+tcp://HOST:PORT/CONTAINER_OR_IMAGE``  a container on that engine; TLS as
                                               ``DOCKER_TLS_VERIFY`` / ``DOCKER_CERT_PATH`` say
``docker+ssh://[USER@]HOST[:PORT]/...``        a container on the engine of that SSH host
=============================================  ===============================================

A NAME that is a container there (running) is attached to; otherwise it is an image, and the
container made earlier for it is reused or one is made (``DockerSandbox.for_image``).
"""
from __future__ import annotations

import getpass
from typing import Any, Dict, Optional
from urllib.parse import parse_qs, unquote, urlsplit

from .base import Sandbox

__all__ = ["SCHEMES", "is_sandbox_url", "sandbox_from_url"]

SCHEMES = ("ssh", "docker+tcp", "docker+ssh")
"""The URL schemes :func:`sandbox_from_url` takes."""


def is_sandbox_url(value: Optional[str]) -> bool:
    """Whether ``value`` is a URL of one of :data:`SCHEMES` (else it is a folder or
    ``docker:IMAGE``)."""
    return bool(value) and str(value).split("://", 1)[0].lower() in SCHEMES and "://" in str(value)


def sandbox_from_url(url: str, **options: Any) -> Sandbox:
    """Open the sandbox a URL names (see the module's docs).

    Args:
        url: an ``ssh://``, ``docker+tcp://`` or ``docker+ssh://`` URL.
        options: more keyword arguments for ``SSHSandbox`` (an ``ssh://`` URL only).

    Returns:
        The sandbox; close it when done (``close()``).

    Raises:
        ValueError: the URL is malformed (no host, no path or name, a bad port, an unknown
            query key).
        FileNotFoundError: the remote folder does not exist.
        UntrustedEndpoint, Unauthorized, SandboxGone: as the sandbox's constructor raises.
    """
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise ValueError(f"not a sandbox URL: {url!r} (use {', '.join(s + '://' for s in SCHEMES)})")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"bad port in {url!r}") from None
    host = parts.hostname
    if not host:
        raise ValueError(f"{url!r} names no host")
    path = unquote(parts.path)
    if scheme == "ssh":
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        unknown = set(query) - {"key", "known_hosts"}
        if unknown:
            raise ValueError(f"unknown option(s) in {url!r}: {', '.join(sorted(unknown))} (key, known_hosts)")
        if not path or path == "/":
            raise ValueError(f"{url!r} names no folder: ssh://user@host/PATH (/~/PATH: in the home)")
        if path == "/~" or path.startswith("/~/"):
            path = path[3:] or "."
        from .ssh import SSHSandbox  # the ssh extra: imported only when used

        kwargs: Dict[str, Any] = dict(options)
        if "key" in query:
            kwargs["key_filename"] = query["key"]
        if "known_hosts" in query:
            kwargs["known_hosts"] = query["known_hosts"]
        return SSHSandbox(host, path, user=unquote(parts.username or "") or getpass.getuser(),
                          port=port or 22, **kwargs)
    name = path.lstrip("/")
    if not name:
        raise ValueError(f"{url!r} names no container or image: {scheme}://HOST/NAME")
    if scheme == "docker+tcp":
        if port is None:
            raise ValueError(f"{url!r} needs a port (2376 for TLS, 2375 without)")
        engine_url = f"tcp://{host}:{port}"
    else:
        who = f"{unquote(parts.username)}@" if parts.username else ""
        engine_url = f"ssh://{who}{host}" + (f":{port}" if port else "")
    return _docker_sandbox(engine_url, name)


def _docker_sandbox(engine_url: str, name: str) -> Sandbox:
    from .docker import DockerSandbox
    from .docker_remote import engine_client

    client = engine_client(engine_url)
    try:
        if ":" not in name and "/" not in name:  # could be a container's id or name
            found = client.api.containers(filters={"id": [name]}) + client.api.containers(
                filters={"name": [f"^/{name}$"]}
            )
            if found:
                sandbox = DockerSandbox.attach(found[0]["Id"], client=client)
                sandbox._owns_client = True  # closing the sandbox closes this engine client
                return sandbox
        sandbox = DockerSandbox.for_image(name, client=client)
        sandbox._owns_client = True
        return sandbox
    except BaseException:
        client.close()
        raise

"""Docker engines on other machines: a ``docker.DockerClient`` for an engine reached over TCP
with TLS, or over SSH, made from the options the docker SDK takes, for
:class:`~bridge_client.sandbox.docker.DockerSandbox`'s ``client=``.

    client = engine_client("tcp://build-02:2376", tls=True)   # certificates from DOCKER_CERT_PATH
    sandbox = DockerSandbox.for_image("python:3.12-slim", client=client)

Commands, files and the bridge's port all go through the engine's API, as with the local
engine: the port through the exec tunnel, so nothing of the container is published on the
remote machine. See :doc:`scaling` and :doc:`docker`.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Mapping, Optional, Union

from ..errors import SandboxGone, Unauthorized, UntrustedEndpoint
from .docker_engine import load_docker as _docker

__all__ = ["engine_client"]


def _keep_engine_ca(api: Any) -> None:
    """requests lets ``REQUESTS_CA_BUNDLE`` / ``CURL_CA_BUNDLE`` from the environment replace a
    session's own ``verify`` (requests issue 3829), which drops the engine's CA and fails every
    TLS handshake with a private CA: keep the session's CA file for this client."""
    merge = api.merge_environment_settings

    def merged(url: Any, proxies: Any, stream: Any, verify: Any, cert: Any) -> Dict[str, Any]:
        settings: Dict[str, Any] = merge(url, proxies, stream, verify, cert)
        if isinstance(api.verify, str) and verify in (None, True):
            settings["verify"] = api.verify
        return settings

    api.merge_environment_settings = merged


def engine_client(
    base_url: Optional[str] = None,
    *,
    tls: Union[None, bool, Any] = None,
    environment: Optional[Mapping[str, str]] = None,
    timeout: float = 60.0,
    use_ssh_client: bool = False,
) -> Any:
    """Connect to a Docker engine and check that it answers.

    Args:
        base_url: ``tcp://HOST:PORT``, ``ssh://USER@HOST[:PORT]``, ``unix:///PATH``; ``None``
            takes ``DOCKER_HOST`` from ``environment`` (the local engine when unset).
        tls: a ``docker.tls.TLSConfig``; ``True`` builds one from ``DOCKER_CERT_PATH``
            (``ca.pem``, ``cert.pem``, ``key.pem``; default ``~/.docker``) verifying the engine;
            ``False`` is plain TCP; ``None`` follows ``DOCKER_TLS_VERIFY`` /
            ``DOCKER_CERT_PATH`` in ``environment``, as the docker CLI does.
        environment: the variables to read (default ``os.environ``).
        timeout: seconds for each API request (not for exec streams, which stay open).
        use_ssh_client: for ``ssh://``: run the ``ssh`` program instead of paramiko.

    Returns:
        A ``docker.DockerClient``; the caller closes it (or hands it to a sandbox).

    Raises:
        UntrustedEndpoint: the engine's TLS certificate did not verify, it refused ours,
            the TLS options are incomplete, or (``ssh://``) the host key is not known.
        Unauthorized: (``ssh://``) the SSH server refused the credentials.
        SandboxGone: the engine does not answer.
        HarnessError: the ``docker`` package is not installed.
    """
    docker = _docker()
    env: Dict[str, str] = dict(os.environ if environment is None else environment)
    if base_url is not None:
        env["DOCKER_HOST"] = base_url
    if tls is True:
        env["DOCKER_TLS_VERIFY"] = "1"
    elif tls is False:
        env.pop("DOCKER_TLS_VERIFY", None)
        env.pop("DOCKER_CERT_PATH", None)
    try:
        kwargs: Dict[str, Any] = docker.utils.kwargs_from_env(environment=env)
    except docker.errors.DockerException as exc:  # TLSParameterError: missing certificate files
        raise UntrustedEndpoint(f"Docker engine {env.get('DOCKER_HOST')}: bad TLS options: {exc}") from None
    if tls is not None and not isinstance(tls, bool):
        kwargs["tls"] = tls
    if kwargs.get("tls") and str(kwargs.get("base_url", "")).startswith("tcp://"):
        kwargs["base_url"] = "https://" + str(kwargs["base_url"])[len("tcp://"):]
    where = kwargs.get("base_url") or "the local engine"
    # The SDK asks the engine for its API version while it is being made, before the CA fix
    # can be applied: ask first with a client of a fixed version, then make the real one.
    version = kwargs.pop("version", None)
    if version is None:
        fixed = docker.constants.DEFAULT_DOCKER_API_VERSION
        probe = _make(docker, where, timeout, use_ssh_client, kwargs, fixed)
        try:
            version = str(probe.api.version(api_version=False)["ApiVersion"])
        except Exception as exc:
            raise _classify(exc, where) from None
        finally:
            probe.close()
    client = _make(docker, where, timeout, use_ssh_client, kwargs, version)
    try:
        client.ping()
    except Exception as exc:
        client.close()
        raise _classify(exc, where) from None
    return client


def _make(
    docker: Any, where: Any, timeout: float, use_ssh_client: bool, kwargs: Dict[str, Any], version: str
) -> Any:
    try:
        client = docker.DockerClient(
            timeout=timeout, use_ssh_client=use_ssh_client, version=version, **kwargs
        )
    except docker.errors.TLSParameterError as exc:
        raise UntrustedEndpoint(f"Docker engine {where}: bad TLS options: {exc}") from None
    except Exception as exc:  # the SSH transport connects here (paramiko's errors)
        raise _classify(exc, where) from None
    _keep_engine_ca(client.api)
    return client


def _classify(exc: BaseException, where: Any) -> Exception:
    text = str(exc) or type(exc).__name__
    kind = type(exc).__name__
    if kind in ("AuthenticationException", "BadAuthenticationType") or "No authentication methods" in text:
        return Unauthorized(f"Docker engine {where}: the SSH server refused the credentials: {text}")
    if kind == "BadHostKeyException" or "known_hosts" in text:
        return UntrustedEndpoint(f"Docker engine {where}: SSH host key refused: {text[:500]}")
    if "SSL" in text or "CERTIFICATE" in text.upper() or "certificate" in text:
        return UntrustedEndpoint(f"Docker engine {where}: TLS failed: {text[:500]}")
    return SandboxGone(f"cannot reach the Docker engine {where}: {text[:500]}")

"""How a connection reaches a bridge's URL: TLS verification and HTTP proxies.

Everything here becomes websocket-client's own options (``sslopt``, ``http_proxy_host``,
``http_proxy_port``, ``http_proxy_auth``, ``proxy_type``); no socket is opened here.

- ``wss://`` URLs are verified (certificate chain and host name) against the system's
  trust store, or against ``ca_bundle`` (a PEM file or a folder of hashed certificates)
  when it is given (``CreateSessionOptions.ca_bundle``). Verification is never turned off.
- Proxies come from the usual environment variables, read the way :mod:`urllib.request`
  (and so ``requests``) reads them: ``https_proxy`` for ``wss://``, ``http_proxy`` for
  ``ws://`` (lower case wins over upper case), ``no_proxy`` for the hosts that go direct.
  Loopback hosts (``localhost``, ``127.0.0.0/8``, ``::1``) always go direct: a proxy cannot
  reach this machine's loopback. ``all_proxy`` is the fallback for both, as in ``requests``.
  An HTTP proxy is used with ``CONNECT`` (a tunnel), for ``ws://`` and ``wss://`` alike, as
  websocket-client does.
"""
from __future__ import annotations

import ipaddress
import os
import ssl
import urllib.request
from typing import Any, Dict, Optional
from urllib.parse import unquote, urlsplit

__all__ = ["connect_options", "proxy_for", "is_loopback"]

_PROXY_TYPES = {name: name for name in ("http", "socks4", "socks4a", "socks5", "socks5h")}


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (``127.0.0.0/8``, ``::1``)."""
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def proxy_for(url: str, environ: Optional[Dict[str, str]] = None) -> Optional[Dict[str, Any]]:
    """The proxy a connection to ``url`` goes through, from the environment, or ``None``.

    Args:
        url: a ``ws://`` or ``wss://`` URL.
        environ: the environment to read (default: ``os.environ``).

    Returns:
        ``None`` for a direct connection, else websocket-client keyword arguments:
        ``{"http_proxy_host": str, "http_proxy_port": int, "http_proxy_auth": (user, password)
        or None, "proxy_type": "http" | "socks4" | "socks4a" | "socks5" | "socks5h"}``.

    Raises:
        ValueError: the proxy variable is not a URL with a host, or names an unknown scheme.
    """
    parts = urlsplit(url)
    host = parts.hostname or ""
    if not host or is_loopback(host):
        return None
    proxies = _environment_proxies(os.environ if environ is None else environ)
    if not proxies:
        return None
    if "no" in proxies:
        port = parts.port or (443 if parts.scheme == "wss" else 80)
        # proxy_bypass_environment matches "host" and "host:port" against no_proxy entries.
        if urllib.request.proxy_bypass_environment(f"{host}:{port}", proxies):  # type: ignore[attr-defined]
            return None
        if _bypass_by_network(host, proxies["no"]):
            return None
    key = "https" if parts.scheme == "wss" else "http"
    value = proxies.get(key) or proxies.get("all")
    if not value:
        return None
    key = key if proxies.get(key) else "all"
    if "://" not in value:
        value = "http://" + value
    proxy = urlsplit(value)
    scheme = proxy.scheme.lower()
    if scheme == "https":
        scheme = "http"  # a TLS connection to the proxy itself is not supported: CONNECT over TCP
    if scheme not in _PROXY_TYPES or not proxy.hostname:
        raise ValueError(f"the {key}_proxy variable is not a usable proxy URL: {value!r}")
    try:
        port = proxy.port or (1080 if scheme.startswith("socks") else 80)
    except ValueError:
        raise ValueError(f"the {key}_proxy variable has a bad port: {value!r}") from None
    auth = (unquote(proxy.username), unquote(proxy.password or "")) if proxy.username else None
    return {
        "http_proxy_host": proxy.hostname,
        "http_proxy_port": port,
        "http_proxy_auth": auth,
        "proxy_type": _PROXY_TYPES[scheme],
    }


def _environment_proxies(environ: Any) -> Dict[str, str]:
    """``{"http": ..., "https": ..., "no": ...}`` from ``*_proxy`` variables; lower case wins."""
    found: Dict[str, str] = {}
    for name, value in environ.items():
        lower = name.lower()
        if value and lower.endswith("_proxy"):
            found[lower[: -len("_proxy")]] = value
    for name, value in environ.items():
        lower = name.lower()
        if lower.endswith("_proxy") and name == lower:
            if value:
                found[lower[: -len("_proxy")]] = value
            else:
                found.pop(lower[: -len("_proxy")], None)
    return found


def _bypass_by_network(host: str, no_proxy: str) -> bool:
    """``no_proxy`` entries written as networks (``10.0.0.0/8``) match addresses in them."""
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    for entry in no_proxy.replace(" ", "").split(","):
        if "/" in entry:
            try:
                if address in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                continue
    return False


def connect_options(url: str, ca_bundle: Optional[str] = None) -> Dict[str, Any]:
    """websocket-client keyword arguments for a connection to ``url``.

    Args:
        url: the endpoint's ``ws://`` or ``wss://`` URL.
        ca_bundle: a PEM file of trusted certificates, or a folder of them (``c_rehash``
            layout), used instead of the system's trust store for ``wss://``.

    Returns:
        ``sslopt`` (verification on: ``CERT_REQUIRED`` and host-name checks) plus the proxy
        options of :func:`proxy_for`, or options that say "direct" explicitly.

    Raises:
        ValueError: ``ca_bundle`` does not exist, or the proxy environment is unusable.
    """
    sslopt: Dict[str, Any] = {"cert_reqs": ssl.CERT_REQUIRED, "check_hostname": True}
    if ca_bundle is not None:
        if os.path.isdir(ca_bundle):
            sslopt["ca_cert_path"] = ca_bundle
        elif os.path.isfile(ca_bundle):
            sslopt["ca_certs"] = ca_bundle
        else:
            raise ValueError(f"the CA bundle {ca_bundle!r} is not a file or a folder")
    options: Dict[str, Any] = {"sslopt": sslopt}
    proxy = proxy_for(url)
    # websocket-client reads the proxy variables itself whenever no proxy host is given; to
    # make our decision (loopback direct) the only one, "direct" is said explicitly: a proxy
    # entry that every host bypasses (http_no_proxy=["*"]), so it is never contacted.
    options.update(proxy if proxy is not None else _DIRECT)
    return options


_DIRECT: Dict[str, Any] = {"http_proxy_host": "direct.invalid", "http_proxy_port": 9, "http_no_proxy": ["*"]}

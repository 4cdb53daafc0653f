"""How a connection reaches a bridge's URL: TLS verification and HTTP proxies.

Everything here becomes websocket-client's own options (``sslopt``, ``http_proxy_host``,
``http_proxy_port``, ``http_proxy_auth``, ``proxy_type``); a direct ``ws://`` URL gets its
TCP socket here instead, which ``client.plain_ws`` upgrades (see :func:`open_options`).

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

import functools
import ipaddress
import os
import socket
import ssl
import urllib.request
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import unquote, urlsplit

from . import randoms

__all__ = ["connect_options", "open_options", "proxy_for", "is_loopback", "BufferedSocket", "MaskKeys"]

_PROXY_TYPES = {name: name for name in ("http", "socks4", "socks4a", "socks5", "socks5h")}


@functools.lru_cache(maxsize=256)  # a pure function of the name, asked once per connection
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


def open_options(url: str, ca_bundle: Optional[str], timeout: float) -> Dict[str, Any]:
    """:func:`connect_options`, plus the connection's own :class:`MaskKeys` (websocket-client's
    ``get_mask_key``), and for a direct ``ws://`` URL (no proxy, no TLS) the TCP
    connection itself, already open, as ``socket``: a :class:`BufferedSocket`, which
    ``Connection`` upgrades with ``client.plain_ws`` (websocket-client would
    take it as its ``socket`` option too, and its small reads be served from one kernel read).

    Raises:
        ValueError: as :func:`connect_options`.
        OSError: the TCP connect failed or took longer than ``timeout`` seconds.
    """
    options = connect_options(url, ca_bundle)
    options["get_mask_key"] = MaskKeys()
    parts = urlsplit(url)
    if parts.scheme != "ws" or options.get("http_proxy_host") != _DIRECT["http_proxy_host"]:
        return options  # TLS, a proxy: websocket-client connects
    options["socket"] = BufferedSocket.connect_to(parts.hostname or "", parts.port or 80, timeout)
    return options


class MaskKeys:
    """The mask keys of one connection's frames (websocket-client's ``get_mask_key``): as
    random as websocket-client's own (``os.urandom``), taken from the process's pool of
    random bytes (``client.randoms``) instead of one system call (and one hand-over of the GIL)
    per frame sent. Safe from several threads."""

    def __call__(self, length: int) -> bytes:
        """``length`` random bytes (4 for a mask key), each handed out once."""
        return randoms.take(length)


# websocket-client's own options on the sockets it opens (websocket._socket.DEFAULT_SOCKET_OPTION).
_SOCKET_OPTIONS = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1), (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
for _name, _value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3)):
    if hasattr(socket, _name):
        _SOCKET_OPTIONS.append((socket.IPPROTO_TCP, getattr(socket, _name), _value))
_READ = 16384  # bytes asked of the kernel per read (websocket-client asks at most as many)


def _addresses(host: str, port: int) -> List[Tuple[Any, ...]]:
    """``socket.getaddrinfo(host, port)`` for a stream socket; an IP address as it is,
    without the call (which gives up the GIL: one hand-over more per connection)."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
        except (OSError, ValueError):
            continue
        address = (host, port) if family == socket.AF_INET else (host, port, 0, 0)
        return [(family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", address)]
    return list(socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM))


class BufferedSocket(socket.socket):
    """A TCP socket whose reads take what the kernel has (up to 16 KiB) and hand it out in
    the pieces websocket-client asks for.

    websocket-client reads the upgrade's answer a byte per ``recv(1)``, and each frame in two
    or three reads (its head, its length, its payload): on a socket with a timeout every
    ``recv`` is a poll and a recv system call, the GIL given up around each (about 130 of them
    for the 101 alone). Here a read asks the kernel for at least 16 KiB and keeps what goes
    past the piece asked for; the next reads are served from it, in order, without a system
    call. Nothing is lost or reordered: every byte the kernel handed over is served before the
    kernel is asked again. Used for direct ``ws://`` connections only (:func:`open_options`).
    """

    _buf = b""  # the last read from the kernel
    _pos = 0  # how much of it has been handed out

    @classmethod
    def connect_to(cls, host: str, port: int, timeout: float) -> "BufferedSocket":
        """Open a TCP connection to ``host:port`` (each address in turn), with
        websocket-client's socket options and ``timeout`` on every operation.

        Raises:
            OSError: no address could be connected to in time.
        """
        error: Optional[OSError] = None
        for family, kind, proto, _name, address in _addresses(host, port):
            sock = cls(family, kind, proto)
            try:
                sock.settimeout(timeout)
                for option in _SOCKET_OPTIONS:
                    sock.setsockopt(*option)
                sock.connect(address)
                return sock
            except OSError as exc:
                sock.close()
                error = exc
        raise error if error is not None else OSError(f"no address for {host}:{port}")

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        """``socket.recv``: what is kept from the last read first (see the class docstring);
        ``flags`` go to the kernel, and only when nothing is kept."""
        buf, pos = self._buf, self._pos
        if pos < len(buf):
            self._pos = pos + bufsize
            return buf[pos : pos + bufsize]
        if flags:
            return super().recv(bufsize, flags)
        data = super().recv(bufsize if bufsize >= _READ else _READ)
        if len(data) <= bufsize:
            self._buf = b""
            return data
        self._buf, self._pos = data, bufsize
        return data[:bufsize]

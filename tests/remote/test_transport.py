"""Which proxy a URL goes through, read from the environment as urllib reads it (pure)."""
from __future__ import annotations

import ssl

import pytest

from bridge_client.client import transport


def _proxy(url, **env):
    return transport.proxy_for(url, environ=env)


def test_wss_uses_https_proxy_and_ws_uses_http_proxy():
    env = {"https_proxy": "http://p1:3128", "http_proxy": "http://p2:8080"}
    assert _proxy("wss://h.example/", **env)["http_proxy_host"] == "p1"
    assert _proxy("ws://h.example/", **env)["http_proxy_host"] == "p2"
    assert _proxy("wss://h.example/", **env)["http_proxy_port"] == 3128


def test_all_proxy_is_the_fallback():
    assert _proxy("wss://h.example/", all_proxy="socks5h://s:1080")["proxy_type"] == "socks5h"
    specific = _proxy("wss://h.example/", all_proxy="http://a:1", https_proxy="http://b:2")
    assert specific["http_proxy_host"] == "b"
    with pytest.raises(ValueError, match="all_proxy"):
        _proxy("wss://h.example/", all_proxy="ftp://p:21")


def test_lower_case_wins_and_an_empty_lower_case_turns_the_proxy_off():
    both = _proxy("wss://h.example/", HTTPS_PROXY="http://up:1", https_proxy="http://low:2")
    assert both["http_proxy_host"] == "low"
    assert _proxy("wss://h.example/", HTTPS_PROXY="http://up:1", https_proxy="") is None


def test_no_proxy_by_suffix_host_port_star_and_network():
    env = {"https_proxy": "http://p:3128"}
    assert _proxy("wss://a.corp.example/", no_proxy="corp.example", **env) is None
    assert _proxy("wss://a.corp.example/", no_proxy=".corp.example", **env) is None
    assert _proxy("wss://acorp.example/", no_proxy="corp.example", **env) is not None
    assert _proxy("wss://anything/", no_proxy="*", **env) is None
    assert _proxy("wss://10.1.2.3/", no_proxy="10.0.0.0/8", **env) is None
    assert _proxy("wss://11.1.2.3/", no_proxy="10.0.0.0/8", **env) is not None


@pytest.mark.parametrize("url", ["ws://127.0.0.1:9/", "wss://localhost/", "ws://[::1]:9/", "wss://127.5.5.5/"])
def test_loopback_always_goes_direct(url):
    assert _proxy(url, http_proxy="http://p:1", https_proxy="http://p:1") is None


def test_credentials_and_scheme_of_the_proxy_url():
    got = _proxy("wss://h.example/", https_proxy="http://us%3Aer:p%40ss@p:3128")
    assert got["http_proxy_auth"] == ("us:er", "p@ss") and got["proxy_type"] == "http"
    assert _proxy("wss://h.example/", https_proxy="p:3128")["http_proxy_port"] == 3128, "no scheme: http"
    assert _proxy("wss://h.example/", https_proxy="socks5h://s:1080")["proxy_type"] == "socks5h"
    with pytest.raises(ValueError, match="https_proxy"):
        _proxy("wss://h.example/", https_proxy="ftp://p:21")


def test_connect_options_verify_always_and_say_direct_explicitly(tmp_path):
    options = transport.connect_options("wss://localhost/")
    assert options["sslopt"] == {"cert_reqs": ssl.CERT_REQUIRED, "check_hostname": True}
    assert options["http_no_proxy"] == ["*"], "websocket-client must not read the environment itself"
    bundle = tmp_path / "ca.pem"
    bundle.write_text("x")
    assert transport.connect_options("wss://h/", str(bundle))["sslopt"]["ca_certs"] == str(bundle)
    assert transport.connect_options("wss://h/", str(tmp_path))["sslopt"]["ca_cert_path"] == str(tmp_path)
    with pytest.raises(ValueError, match="CA bundle"):
        transport.connect_options("wss://h/", str(tmp_path / "missing"))

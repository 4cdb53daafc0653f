"""Remote endpoints as users meet them: wss:// with verification on and a custom CA bundle,
a provider's extra headers, and proxies from the environment. Real bridges behind a local
TLS forwarder with a test CA (trustme), and a local CONNECT proxy."""
from __future__ import annotations

import os

import pytest

import bridge_client as bc
from host_support import options, session_options
from remote_harness import ConnectProxy, RemoteSandbox, basic, server_context

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def remote(workspace):
    made = []

    def make(*args, **kw):
        sandbox = RemoteSandbox(workspace, *args, **kw)
        made.append(sandbox)
        return sandbox

    yield make
    for sandbox in made:
        sandbox.close()


@pytest.fixture
def proxy():
    server = ConnectProxy({"bridge.test": "127.0.0.1"})
    yield server
    server.close()


def _run(sandbox, **kw):
    with bc.create_session(options("echo"), session_options(sandbox, **kw)) as session:
        turn = session.turn("over tls")
        parts = list(turn)
    return turn, parts


def test_wss_with_the_ca_bundle_runs_a_turn(remote, ca, ca_file):
    sandbox = remote(server_context(ca, "localhost"))
    turn, parts = _run(sandbox, ca_bundle=ca_file)
    assert parts[-1].type == "turn-finish" and turn.text() == "over tls"
    assert sandbox.upgrade_requests, "the connection went through the TLS endpoint"


def test_wss_not_signed_by_a_trusted_ca_is_refused_at_once(remote, ca):
    sandbox = remote(server_context(ca, "localhost"))
    with bc.create_session(options("echo"), session_options(sandbox, resend_window=30.0)) as session:
        with pytest.raises(bc.UntrustedEndpoint, match="certificate verify failed|self.signed|unable to get"):
            session.turn("x")
    assert not sandbox.upgrade_requests, "nothing was sent over an unverified connection"


def test_wss_certificate_for_another_host_is_refused(remote, ca, ca_file):
    sandbox = remote(server_context(ca, "other.test"))
    with bc.create_session(options("echo"), session_options(sandbox, ca_bundle=ca_file)) as session:
        with pytest.raises(bc.UntrustedEndpoint, match="[Hh]ostname|match"):
            session.turn("x")


def test_a_ca_bundle_that_does_not_exist_is_bad_input(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        bc.CreateSessionOptions(ca_bundle=str(tmp_path / "missing.pem"))
    with pytest.raises(TypeError, match="path"):
        bc.CreateSessionOptions(ca_bundle=42)


def test_the_endpoint_headers_reach_the_provider_endpoint(remote, ca, ca_file):
    headers = (("X-Provider-Key", "k-123"), ("X-Route", "sandbox-7"))
    sandbox = remote(server_context(ca, "localhost"), headers=headers)
    turn, parts = _run(sandbox, ca_bundle=ca_file)
    assert parts[-1].type == "turn-finish"
    upgrade = sandbox.upgrade_requests[0].decode("latin-1")
    assert "X-Provider-Key: k-123\r\n" in upgrade and "X-Route: sandbox-7\r\n" in upgrade
    assert "Authorization: Bearer " in upgrade, "the bridge's own header is still sent"


def test_wss_through_the_https_proxy_of_the_environment(remote, ca, ca_file, proxy, monkeypatch):
    # bridge.test does not resolve here: only the proxy knows it, so a turn that finishes
    # went through the proxy.
    monkeypatch.setenv("https_proxy", f"http://alice:s%40cret@127.0.0.1:{proxy.port}")
    sandbox = remote(server_context(ca, "bridge.test"), host="bridge.test")
    turn, parts = _run(sandbox, ca_bundle=ca_file)
    assert parts[-1].type == "turn-finish"
    targets = {target for target, _ in proxy.connects}
    assert targets == {f"bridge.test:{port}" for port in (f.port for f in sandbox.forwarders.values())}
    assert all(auth == basic("alice", "s@cret") for _, auth in proxy.connects)


def test_ws_through_the_http_proxy_of_the_environment(remote, proxy, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
    sandbox = remote(None, host="bridge.test", scheme="ws")
    turn, parts = _run(sandbox)
    assert parts[-1].type == "turn-finish"
    assert proxy.connects and all(target.startswith("bridge.test:") for target, _ in proxy.connects)


def test_no_proxy_and_loopback_go_direct(remote, ca, ca_file, proxy, monkeypatch):
    monkeypatch.setenv("https_proxy", f"http://127.0.0.1:{proxy.port}")
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{proxy.port}")
    # A local sandbox's ws://127.0.0.1 endpoint and a wss://localhost one: loopback is direct.
    sandbox = remote(server_context(ca, "localhost"))
    turn, parts = _run(sandbox, ca_bundle=ca_file)
    assert parts[-1].type == "turn-finish"
    assert proxy.connects == []


@pytest.mark.parametrize(
    "url, headers, fragment",
    [
        ("ws://h/", (("X-Key", "a\r\nX-Injected: 1"),), "line break"),
        ("ws://h/", (("X Key", "a"),), "HTTP token"),
        ("ws://h/", (("X-Key",),), "pairs"),
        ("https://h/", (), "ws:// or wss://"),
    ],
)
def test_an_endpoint_that_would_inject_headers_or_is_not_websocket_is_refused(url, headers, fragment):
    with pytest.raises(ValueError, match=fragment):
        bc.Endpoint(url, headers)


def test_the_command_line_goes_direct_to_a_local_sandbox_behind_a_proxy(workspace, proxy):
    import json
    import subprocess
    import sys

    env = dict(os.environ, http_proxy=f"http://127.0.0.1:{proxy.port}", https_proxy=f"http://127.0.0.1:{proxy.port}")

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "bridge_client.cli", *args, "--sandbox", workspace],
                              capture_output=True, text=True, env=env, timeout=60)

    done = cli("run", "hi", "--agent", "echo")
    assert done.returncode == 0, done.stderr
    listed = cli("bridges", "--json")
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert len(rows) == 1 and rows[0]["alive"] is True, "the health check went direct too"
    assert proxy.connects == []

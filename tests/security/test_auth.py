"""C17: the token is compared in constant time, checked before any RPC (the header name in any
case, the token exactly), and a 401 makes the host raise Unauthorized at once, never retried.
(The 401 table of header values: tests/bridge/test_bridge_auth.py.)
"""

from __future__ import annotations

import fcntl
import http.client
import http.server
import os
import threading
from typing import Any, List

import pytest

import bridge_client as bc
from bridge_client.state_dir import identity
from bridge_client.bridge import server as bridge_server
from bridge_client.bridge.server import BridgeServer
from bridge_client.redacted import Redacted
from bridge_harness import TOKEN
from host_support import options, session_options

pytestmark = pytest.mark.timeout(60)

_UPGRADE = {
    "Upgrade": "websocket",
    "Connection": "Upgrade",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
    "Sec-WebSocket-Version": "13",
}


def test_c17_the_token_is_compared_with_hmac_compare_digest(monkeypatch):
    calls: List[Any] = []
    real = bridge_server.hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(bridge_server.hmac, "compare_digest", spy)
    server = BridgeServer.__new__(BridgeServer)
    server._token = Redacted("s3cret-token")
    assert server._authorized(["Bearer s3cret-token"]) is True
    assert server._authorized(["Bearer s3cret-tokeX"]) is False
    assert server._authorized(["Bearer s"]) is False  # a shorter guess goes through the same compare
    assert server._authorized(["Bearer " + "x" * 10_000]) is False
    assert len(calls) == 4, "every well-formed guess is compared by hmac.compare_digest, never by =="
    assert server._authorized([]) is False and server._authorized(["Bearer a", "Bearer b"]) is False


def _upgrade(port: int, headers: dict) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.putrequest("GET", "/", skip_accept_encoding=True)
        for name, value in {**_UPGRADE, **headers}.items():
            conn.putheader(name, value)
        conn.endheaders()
        return conn.getresponse().status
    finally:
        conn.close()


@pytest.mark.parametrize("name", ["Authorization", "authorization", "AUTHORIZATION", "aUtHoRiZaTiOn"])
def test_c17_the_header_name_may_be_in_any_case(make_bridge, name):
    bridge = make_bridge()
    assert _upgrade(bridge.info.port, {name: f"Bearer {TOKEN}"}) == 101


@pytest.mark.parametrize(
    "value",
    [f"Bearer {TOKEN.upper()}", f"Bearer {TOKEN.capitalize()}", f"Bearer {TOKEN} ", f"Bearer  {TOKEN}x"],
    ids=["upper", "capitalized", "trailing-space-kept-out", "suffix"],
)
def test_c17_a_differently_cased_or_altered_token_gets_401_before_any_rpc(make_bridge, value):
    bridge = make_bridge()
    status = _upgrade(bridge.info.port, {"Authorization": value})
    if value.strip() == f"Bearer {TOKEN}":
        assert status == 101  # surrounding spaces are not part of the token
        return
    assert status == 401
    # Nothing reached the RPC layer: no connection was opened, no session exists.
    assert "connection 1 opened" not in bridge.log()
    with bridge.connect() as c:
        (cause,) = c.causes("CloseSession", {"sessionId": "anything"})
        assert cause["error"]["_tag"] == "SessionNotFound"


class _Counting401(http.server.BaseHTTPRequestHandler):
    hits = 0

    def do_GET(self) -> None:  # noqa: N802
        type(self).hits += 1
        self.send_response(401)
        self.send_header("WWW-Authenticate", "Bearer")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_c17_a_session_raises_unauthorized_at_once_and_never_retries(sandbox):
    httpd = http.server.HTTPServer(("127.0.0.1", 0), _Counting401)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        opts = options("echo")
        session = bc.create_session(opts, session_options(sandbox, resend_window=10.0))
        state_dir = identity.state_dir(sandbox.state_root, session.bridge_id)
        info = identity.ListeningInfo(
            1,
            "echo",
            session.bridge_id,
            "127.0.0.1",
            httpd.server_address[1],
            4242,
            "x",
            "2020-01-01T00:00:00Z",
        )
        identity.secure_write(os.path.join(state_dir, identity.LISTENING_FILE), info.to_json().encode())
        # The state directory's lock is held (this test stands in for a live bridge), so the
        # bridge launched behind the 401 (the file might be stale) loses it and exits: the 401
        # is final, and its port was asked once.
        lock = os.open(os.path.join(state_dir, identity.LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            with pytest.raises(bc.Unauthorized) as error:
                session.turn("hello")
        finally:
            os.close(lock)
        assert _Counting401.hits == 1, "one upgrade, no retry, no resend within the window"
        assert opts.token(sandbox.id).reveal() not in str(error.value)
        session.release()
    finally:
        httpd.shutdown()
        thread.join(5)

"""C17: the token is checked before the upgrade; /healthz answers without one."""
from __future__ import annotations

import http.client
import json

import pytest
import websocket

from bridge_harness import TOKEN

pytestmark = pytest.mark.timeout(60)

_UPGRADE = {
    "Upgrade": "websocket",
    "Connection": "Upgrade",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
    "Sec-WebSocket-Version": "13",
}


def _upgrade_status(bridge, authorization=None, path="/"):
    conn = http.client.HTTPConnection("127.0.0.1", bridge.info.port, timeout=5)
    headers = dict(_UPGRADE)
    if authorization is not None:
        headers["Authorization"] = authorization
    try:
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        return response.status, dict(response.getheaders())
    finally:
        conn.close()


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "Bearer wrong-token",
        f"Bearer {TOKEN.upper()}",
        f"Bearer {TOKEN}x",
        f"bearer {TOKEN}",
        f"BEARER {TOKEN}",
        f"Basic {TOKEN}",
        TOKEN,
        "Bearer",
        "",
    ],
    ids=[
        "missing",
        "wrong",
        "token-case",
        "longer",
        "scheme-lower",
        "scheme-upper",
        "basic",
        "no-scheme",
        "empty-token",
        "empty",
    ],
)
def test_c17_upgrade_without_the_right_token_gets_401(shared_echo, authorization):
    status, headers = _upgrade_status(shared_echo, authorization)
    assert status == 401
    assert headers.get("WWW-Authenticate") == "Bearer"


def test_c17_right_token_upgrades(shared_echo):
    status, _ = _upgrade_status(shared_echo, f"Bearer {TOKEN}")
    assert status == 101


def test_c17_websocket_client_sees_401(shared_echo):
    with pytest.raises(websocket.WebSocketBadStatusException) as info:
        websocket.create_connection(shared_echo.url, header=["Authorization: Bearer nope"], timeout=5)
    assert info.value.status_code == 401


def test_c17_two_authorization_headers_get_401(shared_echo):
    conn = http.client.HTTPConnection("127.0.0.1", shared_echo.info.port, timeout=5)
    try:
        conn.putrequest("GET", "/")
        for k, v in _UPGRADE.items():
            conn.putheader(k, v)
        conn.putheader("Authorization", f"Bearer {TOKEN}")
        conn.putheader("Authorization", "Bearer other")
        conn.endheaders()
        assert conn.getresponse().status == 401
    finally:
        conn.close()


def test_c17_any_path_is_accepted_for_the_upgrade(shared_echo):
    with shared_echo.connect(path="/some/where?x=1") as c:
        assert c.value("Hello")["agentId"] == "echo"


def test_healthz_answers_without_a_token(shared_echo):
    conn = http.client.HTTPConnection("127.0.0.1", shared_echo.info.port, timeout=5)
    try:
        conn.request("GET", "/healthz")
        response = conn.getresponse()
        body = response.read()
        assert response.status == 200
        assert response.getheader("Content-Type") == "application/json"
        assert json.loads(body) == {
            "protocol": 1, "bridgeId": shared_echo.info.bridge_id, "instance": shared_echo.info.instance
        }
    finally:
        conn.close()


def test_c17_upgrade_answer_is_short_and_names_no_versions(shared_echo):
    # The 101 carries only what the upgrade needs: no Server header naming the Python and
    # websockets versions, no Date (optional in a 1xx); a refusal keeps its headers.
    status, headers = _upgrade_status(shared_echo, f"Bearer {TOKEN}")
    assert status == 101
    assert {k.lower() for k in headers} == {"upgrade", "connection", "sec-websocket-accept"}
    status, headers = _upgrade_status(shared_echo, "Bearer wrong-token")
    assert status == 401 and "Date" in headers


def test_c17_upgrade_answer_without_extras_still_serves_a_session(shared_echo):
    ws = websocket.create_connection(shared_echo.url, header=[f"Authorization: Bearer {TOKEN}"], timeout=5)
    try:
        ws.send(json.dumps({"_tag": "Request", "id": "1", "tag": "Hello", "payload": None, "headers": []}))
        answer = json.loads(ws.recv())
        assert answer["_tag"] == "Exit" and answer["exit"]["_tag"] == "Success"
    finally:
        ws.close()

"""The web service of docs/services.md, the very code on that page, behind a real threaded
WSGI server on 127.0.0.1: turns run per request and stream as JSON lines, a turn is read
again from its saved state, requests run at once, a client that goes away leaves the turn
running until it is cancelled, and shutdown leaves nothing behind."""
from __future__ import annotations

import json
import os
import re
import threading
import types
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest
import requests

pytestmark = pytest.mark.timeout(120)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "services.md")


def _service_module() -> types.ModuleType:
    with open(DOC) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    module = types.ModuleType("services_doc")
    exec(compile(blocks[0], DOC, "exec"), module.__dict__)  # the page's first block: the service
    return module


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args):  # no access log on the test's stderr
        pass


@pytest.fixture
def service(workspace, tmp_path):
    app = _service_module().TurnService(workspace, str(tmp_path / "turn-states"))
    server = make_server("127.0.0.1", 0, app, server_class=_Server, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", app
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _parts(response):
    return [json.loads(line) for line in response.iter_lines() if line]


def test_a_request_runs_a_turn_and_streams_its_parts_as_json_lines(service, workspace):
    url, app = service
    with requests.post(f"{url}/turns", data=b"echo one > one.txt\ncat one.txt", stream=True, timeout=60) as r:
        assert r.status_code == 200 and r.headers["Content-Type"] == "application/x-ndjson"
        turn_id = r.headers["X-Turn-Id"]
        parts = _parts(r)
    assert parts[0]["type"] == "turn-start" and parts[-1]["type"] == "turn-finish"
    assert parts[-1]["finishReason"] == "stop"
    assert "one\n" in "".join(p.get("text", "") for p in parts if p["type"] == "text-delta")
    with open(os.path.join(workspace, "one.txt")) as f:
        assert f.read() == "one\n"
    # Its state was saved at once: any worker reads the turn again from the bridge.
    assert os.path.exists(os.path.join(app.states, f"{turn_id}.json"))
    again = _parts(requests.get(f"{url}/turns/{turn_id}", timeout=60))
    assert [p["type"] for p in again] == [p["type"] for p in parts]
    later = _parts(requests.get(f"{url}/turns/{turn_id}?steps=1", timeout=60))
    assert later[-1]["finishReason"] == "stop" and len(later) < len(parts)


def test_requests_run_at_once_each_in_its_own_session(service):
    url, _ = service
    results = {}

    def one(n):
        prompt = f"sleep 0.5\necho turn-{n}".encode()
        with requests.post(f"{url}/turns", data=prompt, stream=True, timeout=60) as r:
            results[n] = _parts(r)

    threads = [threading.Thread(target=one, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(results) == [0, 1, 2]
    for n, parts in results.items():
        assert parts[-1]["finishReason"] == "stop"
        assert f"turn-{n}\n" in "".join(p.get("text", "") for p in parts if p["type"] == "text-delta")
    assert len({parts[0]["turn"]["sessionId"] for parts in results.values()}) == 3


def test_a_client_that_goes_away_leaves_the_turn_running_until_cancelled(service):
    url, _ = service
    r = requests.post(f"{url}/turns", data=b"echo started\nsleep 60", stream=True, timeout=60)
    turn_id = r.headers["X-Turn-Id"]
    lines = r.iter_lines()
    assert json.loads(next(lines))["type"] == "turn-start"
    # Once the shell ran its first line (it sleeps now): a cancel sent right after turn-start
    # can stop the shell before it echoes, the faster the bridge answers.
    while "started" not in json.loads(next(lines)).get("text", ""):
        pass
    r.close()  # the client goes away mid-turn
    cancelled = requests.post(f"{url}/turns/{turn_id}/cancel", timeout=60)
    assert cancelled.status_code == 200 and cancelled.json() == {"turnId": turn_id, "status": "running"}
    parts = _parts(requests.get(f"{url}/turns/{turn_id}", timeout=60))
    assert parts[-1]["type"] == "turn-finish" and parts[-1]["finishReason"] == "cancelled"
    assert "started\n" in "".join(p.get("text", "") for p in parts if p["type"] == "text-delta")


def test_unknown_turns_and_bad_input_are_clear_answers(service):
    url, _ = service
    assert requests.get(f"{url}/turns/no-such-turn", timeout=30).status_code == 404
    assert requests.get(f"{url}/nowhere", timeout=30).status_code == 404
    with requests.post(f"{url}/turns", data=b"true", stream=True, timeout=60) as r:
        turn_id = r.headers["X-Turn-Id"]
        _parts(r)
    bad = requests.get(f"{url}/turns/{turn_id}?steps=many", timeout=30)
    assert bad.status_code == 400 and "error" in bad.json()

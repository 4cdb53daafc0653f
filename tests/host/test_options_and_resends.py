"""Options (C01), launch races between hosts (C05), and resends after a drop (C08)."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

import bridge_client as bc
from bridge_client.client.connection import Connection
from bridge_client.errors import ConnectionLost
from bridge_client.wire import rpcs
from host_support import SECRET, options, session_options

pytestmark = pytest.mark.timeout(90)


def test_c01_options_are_checked_and_the_token_is_a_function_of_the_sandbox(sandbox, tmp_path):
    base = options("echo")
    with pytest.raises(ValueError, match="id"):
        bc.BridgeOptions(
            id="", template=base.template, command=base.command, args=base.args, token=base.token
        )
    with pytest.raises(ValueError, match="args"):
        bc.BridgeOptions(id="x", template=base.template, command=base.command, args="-m x", token=base.token)
    with pytest.raises(ValueError, match="token"):
        bc.BridgeOptions(id="x", template=base.template, command=base.command, args=(), token="not callable")
    token = bc.hmac_token(SECRET)
    other = bc.LocalSandbox(str(tmp_path))
    assert token(sandbox.id) == token(sandbox.id) != token(other.id)
    assert SECRET not in repr(token(sandbox.id)) and "redacted" in repr(token(sandbox.id))
    with pytest.raises(TypeError, match="plain JSON"):
        # a module:callable driver: bridge_options checks only the built-in drivers' options
        opts = options("some_module:make_driver", agent_id="some", agent_options={"x": object()})
        bc.create_session(opts, session_options(sandbox))


_HOST = textwrap.dedent(
    """
    import json, sys
    import bridge_client as bc
    opts = bc.bridge_options("echo", secret=sys.argv[2])
    sandbox = bc.LocalSandbox(sys.argv[1])
    so = bc.CreateSessionOptions(workspace=bc.Workspace(sandbox), launch_timeout=30)
    with bc.create_session(opts, so) as s:
        parts = list(s.turn("race"))
        print(json.dumps({"pid": s._hello.pid, "last": parts[-1].finish_reason}))
    """
)


def test_c05_hosts_launching_at_once_end_with_one_bridge(workspace):
    hosts = [
        subprocess.Popen(
            [sys.executable, "-c", _HOST, workspace, SECRET],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    results = []
    for host in hosts:
        out, err = host.communicate(timeout=60)
        assert host.returncode == 0, err
        results.append(json.loads(out))
    assert {r["last"] for r in results} == {"stop"}
    assert len({r["pid"] for r in results}) == 1, f"more than one bridge served: {results}"


def test_c08_a_request_whose_answer_was_lost_is_sent_again(sandbox, monkeypatch):
    sent = []
    real_answer = Connection.answer

    # Every answer to a quick request goes through Connection.answer (StartTurn's too, whose
    # ReadTurn follows it before the answer).
    def answer_then_drop_once(self, pending, tag, timeout=None):
        value = real_answer(self, pending, tag, timeout)
        sent.append(tag)
        if tag == "StartTurn" and sent.count("StartTurn") == 1:
            self.close()  # the answer is lost with the connection
            raise ConnectionLost("dropped after the request went out")
        return value

    monkeypatch.setattr(Connection, "answer", answer_then_drop_once)
    with bc.create_session(options("echo"), session_options(sandbox)) as session:
        turn = session.turn("resend me", turn_id="t-resend")
        parts = list(turn)
    assert sent.count("StartTurn") == 2, "StartTurn went out again on a new connection"
    assert sent.count("OpenSession") == 2, "the new connection opened the session again (C07)"
    assert turn.status in ("running", "finished"), "the second StartTurn found the turn the first had started"
    assert [p.index for p in parts] == list(range(len(parts)))
    assert sum(isinstance(p, bc.TurnStart) for p in parts) == 1


def test_c08_a_request_not_safe_to_resend_may_have_been_received(sandbox, monkeypatch):
    real_call = Connection.call

    def drop(self, tag, payload, timeout=None):
        if tag == "CancelTurn":
            self.close()
            raise ConnectionLost("dropped")
        return real_call(self, tag, payload, timeout)

    monkeypatch.setattr(Connection, "call", drop)
    unsafe = rpcs.Rpc("CancelTurn", stream=False, resend=False, errors=(), check=rpcs.CANCEL_TURN.check)
    with bc.create_session(options("echo"), session_options(sandbox)) as session:
        turn = session.turn("x")
        with pytest.raises(bc.MayHaveBeenReceived):
            session._call(unsafe, {"sessionId": session.id, "turnId": turn.id})
        assert list(turn)[-1].type == "turn-finish", "the session is still usable"


def test_c08_resends_stop_at_the_window_with_bridge_unavailable(sandbox, monkeypatch):
    def always_drop(self, pending, tag, timeout=None):
        self.close()
        raise ConnectionLost("dropped")

    with bc.create_session(options("echo"), session_options(sandbox, resend_window=1.0)) as session:
        list(session.turn("first"))
        state = session.state
        monkeypatch.setattr(Connection, "answer", always_drop)  # every quick request's answer
        with pytest.raises(bc.BridgeUnavailable) as caught:
            session.turn("second")
        assert caught.value.state == state
        assert isinstance(caught.value.__cause__, ConnectionLost)

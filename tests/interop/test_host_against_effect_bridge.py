"""Our host against a bridge written with Effect RPC itself (effect 4.1, src/bridge.ts).

The Effect bridge is launched the way a host launches any bridge program (BridgeOptions
command and args, launch.json, token, listening.json), through a LocalSandbox whose
``expose`` gives its URL. It serves PROTOCOL.md's catalogue from memory with an echo-like
agent, checks the bearer token before the upgrade, and runs with ``disableFatalDefects``.
"""

from __future__ import annotations

import time

import pytest

import bridge_client as bc
from bridge_client.state_dir import identity
from bridge_client.client.connection import END, Connection
from bridge_client.client.launcher import LaunchPlan, connect
from bridge_client.errors import Unauthorized
from bridge_client.template import Template
from host_support import SECRET, kill_all_under
from interop_support import ts_command

pytestmark = pytest.mark.timeout(60)

AGENT_ID = "echo-effect"


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    """One sandbox for the module: its sessions share one Effect bridge (same options, C03),
    launched once; every process in its workspace is killed by pid afterwards."""
    root = tmp_path_factory.mktemp("effect-bridge")
    (root / "home").mkdir()
    (root / "workspace").mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BRIDGE_CLIENT_HOME", str(root / "home"))
        mp.setenv("BRIDGE_CLIENT_SECRET", SECRET)
        try:
            yield bc.LocalSandbox(str(root / "workspace"))
        finally:
            kill_all_under(str(root / "workspace"))


def effect_options(**kw) -> bc.BridgeOptions:
    """BridgeOptions whose bridge program is the Effect bridge (node + tsx + src/bridge.ts)."""
    argv = ts_command("bridge.ts")
    kw.setdefault("bridge_idle_timeout", 60.0)
    return bc.BridgeOptions(
        id=AGENT_ID,
        template=Template(()),
        command=argv[0],
        args=tuple(argv[1:]),
        token=bc.hmac_token(SECRET),
        **kw,
    )


def session_options(sandbox, **kw) -> bc.CreateSessionOptions:
    kw.setdefault("launch_timeout", 30.0)  # node + tsx start in about a second; slack for a busy machine
    kw.setdefault("resend_window", 10.0)
    kw.setdefault("ping_interval", 1.0)
    kw.setdefault("ping_timeout", 3.0)
    return bc.CreateSessionOptions(workspace=bc.Workspace(sandbox), **kw)


def test_c09_session_runs_whole_turns_against_an_effect_bridge(sandbox):
    # With an env, OpenSession carries it: the Effect group's schema decodes it (C19).
    env = {"FOO": "for-effect", "TOKEN": bc.Redacted("sk-x")}
    with bc.create_session(effect_options(), session_options(sandbox, env=env)) as session:
        turn = session.turn("hello from python\nsecond step", turn_id="t-1")
        parts = list(turn)
        # Same turn id, same prompt: harmless; another prompt: the typed failure TurnConflict.
        assert session.turn("hello from python\nsecond step", turn_id="t-1").status == "finished"
        with pytest.raises(bc.TurnConflict) as conflict:
            session.turn("another prompt", turn_id="t-1")
        state = session.release()
    assert isinstance(parts[0], bc.TurnStart) and parts[0].turn.bridge_id == session.bridge_id
    assert parts[0].turn.agent_id == AGENT_ID and parts[0].turn == turn.state
    assert [p.index for p in parts] == list(range(len(parts)))
    assert turn.text() == "hello from python" + "second step"  # one step per line, no newline
    assert turn.steps == 2
    assert isinstance(parts[-1], bc.TurnFinish) and parts[-1].finish_reason == "stop"
    assert conflict.value.fields.get("turnId") == "t-1"
    assert state is not None and state.revision == 1 and state.data == {"turns": 1}


def test_c09_start_and_read_sent_together_against_an_effect_bridge_read_every_part_once(sandbox):
    # The host sends ReadTurn right behind StartTurn; the Effect server runs each request in a
    # fiber of its own, so it may serve the ReadTurn first (then it finds no turn, and the host
    # reads again after StartTurn's answer). Either way every turn is read whole, once.
    with bc.create_session(effect_options(), session_options(sandbox)) as session:
        for n in range(10):
            turn = session.turn(f"turn {n}\nagain", turn_id=f"t-pipe-{n}")
            parts = list(turn)
            assert [p.index for p in parts] == list(range(len(parts)))
            assert turn.text() == f"turn {n}" + "again"
            assert turn.status == "started"
            assert isinstance(parts[-1], bc.TurnFinish)
        conn = session._conn
        assert conn is not None and not [p for p in conn._pending.values() if p.outcome is None]


def test_c09_acks_and_a_cancel_against_an_effect_bridge(sandbox):
    # The Effect server sends a stream's next Chunk only after the Ack of the last one, so a
    # slow turn read to its end proves the host acks; the cancel ends it with "cancelled".
    with bc.create_session(effect_options(), session_options(sandbox)) as session:
        turn = session.turn("slow words", turn_id="t-slow")
        seen = []
        for part in turn:
            seen.append(part)
            if sum(isinstance(p, bc.TextDelta) for p in seen) == 5:
                result = turn.cancel()
                assert result is not None and result.turn_id == "t-slow"
        assert isinstance(seen[-1], bc.TurnFinish) and seen[-1].finish_reason == "cancelled"
        deltas = [p for p in seen if isinstance(p, bc.TextDelta)]
        assert 5 <= len(deltas) < 400, "the cancel stopped the turn early"
        assert [p.text for p in deltas] == [f"w{i} " for i in range(len(deltas))]


def _plan(sandbox, options: bc.BridgeOptions, token=None) -> LaunchPlan:
    token = token or options.token(sandbox.id)
    bridge = identity.bridge_id(options.id, options.command, options.args, options.agent_options, token)
    return LaunchPlan(
        sandbox=sandbox,
        agent_id=options.id,
        bridge_id=bridge,
        command=options.command,
        args=options.args,
        template=options.template,
        agent_options=options.agent_options,
        token=token,
        launch_timeout=30.0,
        ping_interval=0.2,
        ping_timeout=3.0,
    )


def test_b07_c17_connection_level_rpcs_pings_and_failures_against_an_effect_bridge(sandbox):
    options = effect_options()
    plan = _plan(sandbox, options)
    conn, hello = connect(plan)
    try:
        assert hello.agent_id == AGENT_ID and hello.bridge_id == plan.bridge_id and hello.protocol == 1
        # Pings: the host pings every 0.2 s; silence past 3.2 s would drop the connection.
        time.sleep(1.0)
        assert not conn.closed
        opened = conn.call("OpenSession", {"sessionId": "s-1", "state": None}, timeout=10)
        assert opened == {"sessionId": "s-1", "revision": 0, "data": None}
        higher = {"sessionId": "s-1", "revision": 7, "data": {"kept": True}}
        assert conn.call("OpenSession", {"sessionId": "s-1", "state": higher}, timeout=10) == higher
        started = conn.call(
            "StartTurn", {"sessionId": "s-1", "turnId": "ct-1", "prompt": "a b c"}, timeout=10
        )
        assert started == {"turnId": "ct-1", "status": "started"}
        stream = conn.stream("ReadTurn", {"sessionId": "s-1", "turnId": "ct-1", "offset": 2, "afterStep": 0})
        values = []
        while True:
            got = stream.take(timeout=10)
            if got is END:
                break
            values.extend(got)
        assert [v["index"] for v in values] == list(range(2, 2 + len(values)))
        assert values[-1]["type"] == "turn-finish"
        cancelled = conn.call("CancelTurn", {"sessionId": "s-1", "turnId": "ct-1"}, timeout=10)
        assert cancelled["status"] == "finished"
        # Typed failures, decoded into our error classes with their fields.
        with pytest.raises(bc.SessionNotFound) as missing:
            conn.call("StartTurn", {"sessionId": "nope", "turnId": "ct-2", "prompt": "x"}, timeout=10)
        assert missing.value.fields == {"sessionId": "nope"}
        with pytest.raises(bc.TurnNotFound):
            conn.call("CancelTurn", {"sessionId": "s-1", "turnId": "t-none"}, timeout=10)
        with pytest.raises(bc.TurnNotFound):
            stream = conn.stream(
                "ReadTurn", {"sessionId": "s-1", "turnId": "t-none", "offset": 0, "afterStep": 0}
            )
            stream.take(timeout=10)
        # An RPC the Effect server does not know, and a payload it cannot decode: Die, for that
        # request alone; the connection goes on.
        with pytest.raises(bc.ProtocolError, match="Unknown request tag"):
            conn.call("NoSuchRpc", None, timeout=10)
        with pytest.raises(bc.ProtocolError, match="Expected"):
            conn.call("StartTurn", {"sessionId": 5}, timeout=10)
        # An interrupted read: the Effect server answers Exit Failure[Interrupt] and goes on.
        conn.call("StartTurn", {"sessionId": "s-1", "turnId": "ct-slow", "prompt": "slow"}, timeout=10)
        slow = conn.stream("ReadTurn", {"sessionId": "s-1", "turnId": "ct-slow", "offset": 0, "afterStep": 0})
        assert slow.take(timeout=10)
        slow.close()
        assert conn.call("CloseSession", {"sessionId": "s-1"}, timeout=10)["sessionId"] == "s-1"
        with pytest.raises(bc.SessionNotFound):
            conn.call("CloseSession", {"sessionId": "s-1"}, timeout=10)
        assert conn.call("Hello", None, timeout=10)["instance"] == hello.instance
        assert not conn.closed
    finally:
        conn.close()
    # C17: the Effect bridge refuses a wrong token with 401 before any RPC; we raise Unauthorized.
    endpoint = sandbox.expose(_port(plan))
    with pytest.raises(Unauthorized):
        Connection(endpoint, bc.Redacted("wrong-token"), open_timeout=10)


def _port(plan: LaunchPlan) -> int:
    return identity.parse_listening(plan.sandbox.read_file(plan.path(identity.LISTENING_FILE))).port


def test_c09_an_effect_bridge_serves_start_turn_and_read_turn_sent_in_one_batch_frame(sandbox):
    # The host's StartTurn and ReadTurn go out as one frame (a JSON array): Effect RPC's JSON
    # serialization decodes it into two requests and answers both. Its server runs each in a
    # fiber of its own, so the ReadTurn may be served first (TurnNotFound, read again) or not.
    conn, _ = connect(_plan(sandbox, effect_options()))
    try:
        conn.call("OpenSession", {"sessionId": "s-batch", "state": None}, timeout=10)
        opened: list = []
        start = {"sessionId": "s-batch", "turnId": "bt-1", "prompt": "a b"}
        read = {"sessionId": "s-batch", "turnId": "bt-1", "offset": 0, "afterStep": 0}
        sent, stream = conn.request_and_stream("StartTurn", start, "ReadTurn", read, opened)
        assert opened == [stream]
        assert conn.answer(sent, "StartTurn", timeout=10) == {"turnId": "bt-1", "status": "started"}
        values: list = []
        try:
            while (got := stream.take(timeout=10)) is not END:
                values.extend(got)
        except bc.TurnNotFound:  # served before the StartTurn: the read again finds the turn
            stream = conn.stream("ReadTurn", read)
            while (got := stream.take(timeout=10)) is not END:
                values.extend(got)
        assert [v["index"] for v in values] == list(range(len(values)))
        assert values[0]["type"] == "turn-start" and values[-1]["type"] == "turn-finish"
        assert not conn.closed
    finally:
        conn.close()

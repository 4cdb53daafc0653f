"""A real session, a real bridge process, a real folder: the main job end to end."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading

import pytest

import bridge_client as bc
from host_support import SECRET, options, session_options

pytestmark = pytest.mark.timeout(60)


def _types(parts):
    return [p.type for p in parts]


def test_c10_shell_turn_streams_in_order_and_changes_the_folder(sandbox, workspace):
    with bc.create_session(options("shell"), session_options(sandbox)) as session:
        turn = session.turn("echo 'hello from the sandbox' > hello.txt\ncat hello.txt")
        parts = list(turn)
    assert isinstance(parts[0], bc.TurnStart), "turn-start comes first (C10)"
    assert isinstance(parts[-1], bc.TurnFinish) and parts[-1].finish_reason == "stop"
    assert [p.index for p in parts] == list(range(len(parts))), "offsets are 0, 1, 2, ... with none missing"
    assert parts[0].turn == turn.state
    assert turn.state.prompt.endswith("cat hello.txt") and turn.state.bridge_id == session.bridge_id
    with open(os.path.join(workspace, "hello.txt")) as f:
        assert f.read() == "hello from the sandbox\n"
    calls = [p for p in parts if isinstance(p, bc.ToolCall)]
    assert [c.input["command"] for c in calls] == [
        "echo 'hello from the sandbox' > hello.txt",
        "cat hello.txt",
    ]
    assert turn.text() == "hello from the sandbox\n"
    assert turn.steps == 2
    # Each step is framed by step-start and step-finish.
    assert _types(parts).count("step-start") == 2 and _types(parts).count("step-finish") == 2


def test_c10_turn_state_is_ready_before_iterating(sandbox):
    with bc.create_session(options("echo"), session_options(sandbox)) as session:
        turn = session.turn("hi there", turn_id="turn-1")
        state = turn.state
        assert state.turn_id == "turn-1" and state.session_id == session.id
        assert bc.TurnState.from_json(state.to_json()) == state
        first = next(turn)
        assert isinstance(first, bc.TurnStart) and first.turn == state
        assert "".join(p.text for p in turn if isinstance(p, bc.TextDelta)) == "hi there"


def test_c09_same_turn_id_is_harmless_and_other_prompt_conflicts(sandbox):
    with bc.create_session(options("echo"), session_options(sandbox)) as session:
        list(session.turn("one", turn_id="t-same"))
        again = session.turn("one", turn_id="t-same")
        assert again.status == "finished"
        assert [p.type for p in again][-1] == "turn-finish"
        with pytest.raises(bc.TurnConflict):
            session.turn("two", turn_id="t-same")


def test_c02_a_sandbox_is_required():
    opts = options("echo")
    with pytest.raises(bc.HarnessError, match="requires a sandbox"):
        bc.create_session(opts, bc.CreateSessionOptions())


def test_c16_release_returns_state_twice_and_blocks_other_calls(sandbox):
    session = bc.create_session(options("echo"), session_options(sandbox))
    list(session.turn("count me"))
    state = session.release()
    assert isinstance(state, bc.SessionState) and state.session_id == session.id
    assert state.data == {"turns": 1}
    assert session.release() == state
    assert not session.connected
    with pytest.raises(bc.SessionReleased):
        session.turn("again")
    alive = [t.name for t in threading.enumerate() if t.name.startswith("bridge-client-")]
    assert alive == [], f"threads left after release: {alive}"


def test_c07_resume_from_state_in_a_new_session(sandbox):
    with bc.create_session(options("echo"), session_options(sandbox)) as first:
        list(first.turn("a"))
    state = first.state
    with bc.create_session(options("echo"), session_options(sandbox, resume=state)) as second:
        assert second.id == first.id
        list(second.turn("b"))
        assert second.state.data == {"turns": 2}
        assert second.state.revision > state.revision


_OTHER_HOST = textwrap.dedent(
    """
    import json, sys
    import bridge_client as bc
    opts = bc.bridge_options("echo", secret=sys.argv[2], agent_options=json.loads(sys.argv[3]))
    sandbox = bc.LocalSandbox(sys.argv[1])
    with bc.create_session(opts, bc.CreateSessionOptions(workspace=bc.Workspace(sandbox))) as s:
        parts = list(s.turn("from another process"))
        print(json.dumps({"pid": s._hello.pid, "bridge": s.bridge_id, "last": parts[-1].finish_reason}))
    """
)


def _other_host(workspace, agent_options) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", _OTHER_HOST, workspace, SECRET, json.dumps(agent_options)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_c03_hosts_alike_share_one_bridge_and_other_options_get_their_own(sandbox, workspace):
    with bc.create_session(options("echo", agent_options={"steps": 1}), session_options(sandbox)) as session:
        list(session.turn("mine"))
        mine = session._hello.pid
        other = _other_host(workspace, {"steps": 1})
        assert other == {"pid": mine, "bridge": session.bridge_id, "last": "stop"}
        different = _other_host(workspace, {"steps": 2})
        assert different["bridge"] != session.bridge_id
        assert different["pid"] != mine
        bridges = os.listdir(os.path.join(sandbox.state_root, "bridges"))
        assert sorted(bridges) == sorted([session.bridge_id, different["bridge"]])


def test_c11_break_leaves_the_turn_running_and_session_usable(sandbox):
    with bc.create_session(
        options("echo", agent_options={"steps": 3, "delay": 0.01}), session_options(sandbox)
    ) as session:
        turn = session.turn("a b c")
        for part in turn:
            if isinstance(part, bc.StepFinish):
                break
        assert turn.steps == 1
        state = turn.state
        # A new turn on the same session works; the first one finished in the bridge anyway.
        assert [p.type for p in session.turn("next")][-1] == "turn-finish"
        rest = list(session.continue_turn(state, steps=1))
        assert rest[0].type == "turn-start"
        assert {p.step for p in rest if p.step is not None} == {1, 2}
        assert rest[-1].type == "turn-finish"


def test_c09_reading_goes_on_after_the_connection_drops(sandbox):
    opts = options("echo", agent_options={"steps": 4, "chunks": 20, "delay": 0.005})
    with bc.create_session(opts, session_options(sandbox)) as session:
        turn = session.turn("x y z")
        seen = []
        for part in turn:
            seen.append(part)
            if len(seen) in (5, 30, 31):
                session._conn.close()  # the connection drops under the reader
        assert [p.index for p in seen] == list(range(len(seen)))
        assert seen[-1].type == "turn-finish"
        assert turn.text() == "x y z" * 4


def test_cancel_turn_ends_with_cancelled(sandbox):
    opts = options("echo", agent_options={"steps": 50, "delay": 0.05})
    with bc.create_session(opts, session_options(sandbox)) as session:
        turn = session.turn("slow")
        next(turn)
        result = session.cancel_turn()
        assert result.turn_id == turn.id
        parts = list(turn)
        assert parts[-1].type == "turn-finish" and parts[-1].finish_reason == "cancelled"
        assert turn.steps < 50


def test_c12_continue_from_another_session_after_the_first_was_released(sandbox):
    opts = options("echo", agent_options={"steps": 3, "delay": 0.02})
    first = bc.create_session(opts, session_options(sandbox))
    turn = first.turn("go on")
    for part in turn:
        if isinstance(part, bc.StepFinish):
            break
    saved = turn.state.to_json()
    first.release()
    with bc.create_session(opts, session_options(sandbox)) as second:
        rest = list(second.continue_turn(bc.TurnState.from_json(saved), steps=1))
    assert rest[0].type == "turn-start" and rest[-1].type == "turn-finish"
    assert rest[-1].finish_reason == "stop"
    assert sorted({p.step for p in rest if p.step is not None}) == [1, 2]


def test_c02_bridge_agent_hands_out_sessions_behind_its_bridge(sandbox):
    opts = options("echo")
    agent = bc.bridge_agent(opts)
    assert agent.id == "echo" and agent.requires_sandbox is True and agent.template is opts.template
    with agent.create_session(session_options(sandbox)) as session:
        assert [p.type for p in session.turn("via the agent")][-1] == "turn-finish"
    with pytest.raises(bc.HarnessError, match="requires a sandbox"):
        agent.create_session(bc.CreateSessionOptions())

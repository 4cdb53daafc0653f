"""The shell driver, run by a real bridge: streaming, timeouts, cancel, cwd, environment."""
from __future__ import annotations

import os
import time

import pytest

from bridge_client.bridge.store import read_parts
from bridge_client.wire import frames
from bridge_harness import TOKEN, text_of

pytestmark = pytest.mark.timeout(60)


def _run(bridge, sid, tid, prompt):
    with bridge.connect() as c:
        c.open(sid)
        assert c.start(sid, tid, prompt) == "started"
        parts, _, exit_ = c.read(sid, tid)
    assert exit_["_tag"] == "Success"
    return parts


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def test_shell_streams_output_before_the_command_ends(make_bridge, sid, tid):
    bridge = make_bridge(driver="shell")
    with bridge.connect() as c:
        c.open(sid)
        c.start(sid, tid, "echo first; sleep 1.5; echo second")
        rid = c.request("ReadTurn", {"sessionId": sid, "turnId": tid, "offset": 0, "afterStep": 0})
        t0 = time.monotonic()
        seen, first_at = [], None
        while True:
            message = c.recv()
            if message["_tag"] == "Exit":
                break
            seen.extend(message["values"])
            if first_at is None and "first" in text_of(seen):
                assert not any(p["type"] == "tool-result" for p in seen)
                first_at = time.monotonic() - t0
            c.send(frames.Ack(rid))
    assert first_at is not None and first_at < 1.0, (
        "the first line should arrive while the command still runs"
    )
    assert text_of(seen) == "first\nsecond\n"
    (result,) = [p for p in seen if p["type"] == "tool-result"]
    assert result["output"] == {"exitCode": 0, "timedOut": False} and result["isError"] is False
    assert seen[-1]["finishReason"] == "stop"


def test_shell_one_step_per_command_and_session_state_counts_them(make_bridge, sid, tid):
    bridge = make_bridge(driver="shell")
    parts = _run(bridge, sid, tid, "echo one\n\n   \necho two\n")
    calls = [p for p in parts if p["type"] == "tool-call"]
    assert [c["input"] for c in calls] == [{"command": "echo one"}, {"command": "echo two"}]
    assert [c["step"] for c in calls] == [0, 1]
    (state,) = [p for p in parts if p["type"] == "session-state"]
    assert state["state"]["data"] == {"commands": 2}
    assert text_of(parts) == "one\ntwo\n"


def test_shell_runs_in_the_workspace(make_bridge, sid, tid):
    bridge = make_bridge(driver="shell")
    parts = _run(bridge, sid, tid, "pwd")
    assert text_of(parts).strip() == os.path.realpath(bridge.workspace)


def test_shell_children_never_see_bridge_variables_or_the_token(make_bridge, sid, tid):
    bridge = make_bridge(driver="shell")
    parts = _run(bridge, sid, tid, "env")
    env_text = text_of(parts)
    assert "PATH=" in env_text
    assert "BRIDGE_CLIENT_" not in env_text
    assert TOKEN not in env_text


def test_shell_kills_the_process_group_on_timeout(make_bridge, sid, tid):
    bridge = make_bridge(driver="shell", options={"timeout": 0.5})
    t0 = time.monotonic()
    parts = _run(bridge, sid, tid, "sleep 30 & echo child=$!; wait\necho never")
    assert time.monotonic() - t0 < 5
    child = int(text_of(parts).split("child=")[1].split()[0])
    (result,) = [p for p in parts if p["type"] == "tool-result"]
    assert result["output"]["timedOut"] is True and result["isError"] is True
    finish = parts[-1]
    assert finish["finishReason"] == "error"
    assert finish["error"].startswith("command timed out after 0.5 s: sleep 30")
    assert "never" not in text_of(parts)
    time.sleep(0.1)
    assert not _alive(child)


def test_shell_failing_command_stops_the_turn(make_bridge, sid, tid):
    bridge = make_bridge(driver="shell")
    parts = _run(bridge, sid, tid, "echo a; exit 3\necho b")
    assert parts[-1]["finishReason"] == "error"
    assert parts[-1]["error"] == "command exited with status 3: echo a; exit 3"
    (result,) = [p for p in parts if p["type"] == "tool-result"]
    assert result["output"] == {"exitCode": 3, "timedOut": False}
    assert text_of(parts) == "a\n"


def test_shell_keep_going_runs_the_rest(make_bridge, sid, tid):
    bridge = make_bridge(driver="shell", options={"keep_going": True})
    parts = _run(bridge, sid, tid, "false\necho b")
    assert parts[-1]["finishReason"] == "stop"
    assert [p["output"]["exitCode"] for p in parts if p["type"] == "tool-result"] == [1, 0]
    assert text_of(parts) == "b\n"


def test_shell_cancel_kills_a_running_command(make_bridge, sid, tid):
    bridge = make_bridge(driver="shell")
    with bridge.connect() as c:
        c.open(sid)
        c.start(sid, tid, "echo started; sleep 30")
        time.sleep(0.3)
        c.value("CancelTurn", {"sessionId": sid, "turnId": tid})
        t0 = time.monotonic()
        parts, _, _ = c.read(sid, tid)
        assert time.monotonic() - t0 < 4
    assert parts[-1]["finishReason"] == "cancelled"
    assert [p["finishReason"] for p in parts if p["type"] == "step-finish"] == ["cancelled"]


def test_shell_stdin_is_empty_and_utf8_split_across_reads_is_kept(make_bridge, sid, tid):
    bridge = make_bridge(driver="shell")
    parts = _run(bridge, sid, tid, "cat\nprintf '\\303'; sleep 0.2; printf '\\251 ok\\n'")
    assert text_of(parts) == "\u00e9 ok\n"


def test_shell_sigterm_kills_running_commands_and_leaves_the_turn_unfinished(make_bridge, sid, tid):
    bridge = make_bridge(driver="shell")
    with bridge.connect() as c:
        c.open(sid)
        c.start(sid, tid, "sleep 30 & echo child=$!; wait")
        rid = c.request("ReadTurn", {"sessionId": sid, "turnId": tid, "offset": 0, "afterStep": 0})
        seen = []
        while "child=" not in text_of(seen):
            seen.extend(c.recv()["values"])
            c.send(frames.Ack(rid))
    child = int(text_of(seen).split("child=")[1].split()[0])
    assert bridge.stop() == 0
    assert not _alive(child)
    import sqlite3

    conn = sqlite3.connect(os.path.join(bridge.state, "bridge.sqlite3"))
    try:
        (status,) = conn.execute("SELECT status FROM turns WHERE id = ?", (tid,)).fetchone()
        types = [p.type for p in read_parts(os.path.join(bridge.state, "bridge.sqlite3"), tid)]
    finally:
        conn.close()
    assert status == "running"  # left unfinished, to be continued (B05)
    assert "turn-finish" not in types

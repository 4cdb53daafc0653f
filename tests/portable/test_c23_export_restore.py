"""C23, a session outlives its sandbox: export a session to one file, restore it into another
sandbox (a second local folder; real bridges, real stores), and the session goes on there."""
from __future__ import annotations

import json
import os
import shutil

import pytest

import bridge_client as bc
from bridge_client.wire import portable
from host_support import kill_all_under, options, session_options

pytestmark = pytest.mark.timeout(60)


def _texts(parts):
    return "".join(p.text for p in parts if p.type == "text-delta")


def test_c23_echo_export_restore_goes_on_in_the_new_sandbox(sandbox, other_sandbox, tmp_path):
    out = str(tmp_path / "chat.export")
    with bc.create_session(options("echo"), session_options(sandbox)) as session:
        first = list(session.turn("one", turn_id="t-1"))
        second = list(session.turn("two", turn_id="t-2"))
        assert session.export(out) == out
        sid = session.id
    header, body = open(out, "rb").read().split(b"\n")[:2]
    assert json.loads(header)["format"] == portable.FORMAT and json.loads(header)["version"] == 1
    assert [t["turnId"] for t in json.loads(body)["turns"]] == ["t-1", "t-2"]

    restored = bc.restore_session(out, session_options(other_sandbox), options("echo"))
    with restored:
        assert restored.id == sid
        # The imported turns are there at their offsets: read again, they are what was read.
        again = list(restored.turn("one", turn_id="t-1"))
        assert [p.to_dict() for p in again] == [p.to_dict() for p in first]
        # A used turn id is never a new turn: another prompt under it is refused.
        with pytest.raises(bc.TurnConflict):
            restored.turn("not two", turn_id="t-2")
        third = list(restored.turn("three", turn_id="t-3"))
        assert third[-1].type == "turn-finish" and _texts(third).strip() == "three"
        assert third[0].turn.bridge_id == restored.bridge_id
    assert _texts(second)


HERE = os.path.dirname(os.path.abspath(__file__))
DRIVERS = os.path.join(os.path.dirname(HERE), "drivers")
REPO = os.path.dirname(os.path.dirname(HERE))


def test_c23_openai_restored_session_sends_the_earlier_turns(
    sandbox, workspace, other_sandbox, tmp_path, monkeypatch
):
    """The openai driver's checkpoint is its messages: the restored bridge's first request to
    the model holds turn 1's prompt and answer (the scripted chat-completions server's log)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([DRIVERS, REPO, os.environ.get("PYTHONPATH", "")]))
    log = str(tmp_path / "requests.jsonl")
    opts = options(
        "openai_mock:make_driver", agent_id="openai",
        agent_options={"model": "gpt-test", "backoff_initial": 0.01, "backoff_max": 0.05,
                       "mock": {"scenario": "plain", "log": log}},
    )
    out = str(tmp_path / "chat.export")
    with bc.create_session(opts, session_options(sandbox)) as session:
        assert _texts(list(session.turn("Say hello"))) == "Hello, world!"
        session.export(out)
    # The first sandbox is gone: its bridge (SIGKILL by pid), its folder, its bridge's store.
    kill_all_under(workspace, grace=0.0)
    shutil.rmtree(sandbox._state_root)
    shutil.rmtree(workspace)
    with bc.restore_session(out, session_options(other_sandbox), opts) as restored:
        parts = list(restored.turn("And again?"))
    assert parts[-1].finish_reason == "stop"
    with open(log) as f:
        requests = [json.loads(line) for line in f]
    assert len(requests) == 2
    assert requests[1]["body"]["messages"][1:] == [
        {"role": "user", "content": "Say hello"},
        {"role": "assistant", "content": "Hello, world!"},
        {"role": "user", "content": "And again?"},
    ]


def test_c23_the_guide_runs_as_written(workspace):
    """docs/portable-sessions.md's example, pasted in an empty folder: export, the old sandbox
    removed, restore, the imported turn read again as it was, and the next turn."""
    import re
    import subprocess
    import sys

    page = open(os.path.join(REPO, "docs", "portable-sessions.md"), encoding="utf-8").read()
    code = re.search(r"```python\n(.*?)```", page, re.S).group(1)
    script = os.path.join(workspace, "snippet.py")
    with open(script, "w", encoding="utf-8") as f:
        f.write(code)
    done = subprocess.run([sys.executable, script], cwd=workspace, capture_output=True, text=True,
                          timeout=100)
    try:
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert lines == ["imported: the first turn", "finished: the next turn"], done.stdout
        assert not os.path.exists(os.path.join(workspace, "old-sandbox"))
    finally:
        kill_all_under(os.path.join(workspace, "new-sandbox"))


def test_c23_export_while_a_turn_runs_and_the_restore_continues_it(
    sandbox, workspace, other_sandbox, other_workspace, tmp_path
):
    """An export taken while a turn runs holds it up to its last committed part; restored, the
    turn continues from its last completed step (the unfinished step is reset and run again)."""
    out = str(tmp_path / "chat.export")
    prompt = "echo one\ntouch started && echo started && sleep 4\necho two"
    with bc.create_session(options("shell"), session_options(sandbox)) as session:
        turn = session.turn(prompt, turn_id="t-run")
        for part in turn:
            if part.type == "text-delta" and "started" in part.text:
                break  # step 1 runs its sleep now
        session.export(out)
        session.suspend_turn()
    body = portable.decode_export(open(out, "rb").read())
    (exported,) = body["turns"]
    assert exported["status"] == "running"
    held = len(exported["parts"])
    done = max(i for i, p in enumerate(exported["parts"]) if p["type"] == "step-finish") + 1
    kill_all_under(workspace, grace=0.0)
    shutil.rmtree(sandbox._state_root)
    with bc.restore_session(out, session_options(other_sandbox), options("shell")) as restored:
        again = restored.turn(prompt, turn_id="t-run")
        parts = list(again)
    # The completed step, as the export holds it; then the unfinished step reset, at the
    # offset after the export's last part: offsets go on, none reused.
    assert [p.to_dict() for p in parts[:done]] == exported["parts"][:done]
    assert parts[done].type == "step-reset" and parts[done].index == held
    later = [p.index for p in parts[done:]]
    assert later == sorted(set(later))
    assert parts[-1].type == "turn-finish" and parts[-1].finish_reason == "stop"
    assert again.text().count("one") == 1 and "two" in again.text()
    assert os.path.exists(os.path.join(other_workspace, "started"))


def test_c23_an_export_that_fails_midway_leaves_the_old_file_whole(sandbox, tmp_path, monkeypatch):
    """No half-written file: a failure while the new file is written (a full disk at its
    flush, here) leaves the target as it was and no temporary file beside it."""
    out = tmp_path / "chat.export"
    with bc.create_session(options("echo"), session_options(sandbox)) as session:
        list(session.turn("one"))
        session.export(out)
        before = out.read_bytes()
        list(session.turn("two"))
        real_fsync = os.fsync

        def full_disk(fd):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(os, "fsync", full_disk)
        with pytest.raises(OSError, match="No space"):
            session.export(out)
        monkeypatch.setattr(os, "fsync", real_fsync)
        assert out.read_bytes() == before
        assert sorted(os.listdir(tmp_path)) == sorted(n for n in os.listdir(tmp_path) if ".tmp" not in n)
        session.export(out)
    assert len(portable.decode_export(out.read_bytes())["turns"]) == 2
    assert oct(os.stat(out).st_mode & 0o777) == "0o600"

"""C23, Claude Code's transcript in an export: found by its session id, whole lines only, and
put back under the new workspace's project folder (real files in a private config dir)."""
from __future__ import annotations

import os
import re

from bridge_client.drivers import transcripts


def test_c23_claude_transcript_moves_to_the_new_workspaces_project(tmp_path, monkeypatch):
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "config"))
    old, new = tmp_path / "old ws", tmp_path / "new.ws"
    old.mkdir()
    new.mkdir()
    folder = transcripts.claude_project_dir(str(old))
    # Every character but a letter or a digit becomes '-' (the real CLI's rule: the real-agent
    # test's workspace paths hold '_' and '-', and the CLI resumes from what this names).
    assert os.path.basename(folder) == re.sub(r"[^A-Za-z0-9]", "-", os.path.realpath(old))
    os.makedirs(folder)
    with open(os.path.join(folder, "abc-123.jsonl"), "w") as f:
        f.write('{"type":"user"}\n{"type":"assistant"}\n{"type":"us')  # a line being written
    data = {"session_id": "abc-123"}
    files = transcripts.export_claude(data, str(new))  # not in new's project: any project's
    whole = '{"type":"user"}\n{"type":"assistant"}\n'
    assert files == [{"name": transcripts.CLAUDE_TRANSCRIPT, "text": whole}]
    transcripts.import_claude(data, files, str(new))
    moved = os.path.join(transcripts.claude_project_dir(str(new)), "abc-123.jsonl")
    assert open(moved).read() == files[0]["text"]
    assert oct(os.stat(moved).st_mode & 0o777) == "0o600"
    assert transcripts.export_claude({"session_id": None}) == []
    assert transcripts.export_claude({"session_id": "../../etc/passwd"}) == []


def test_c23_codex_rollout_goes_back_to_its_place_and_nothing_else_is_written(tmp_path, monkeypatch):
    old, new = tmp_path / "old-codex", tmp_path / "new-codex"
    day = old / "sessions" / "2026" / "12" / "07"
    day.mkdir(parents=True)
    (day / "rollout-2026-12-07T13-00-00-th-1.jsonl").write_text('{"a":1}\n{"b":')
    monkeypatch.setenv("CODEX_HOME", str(old))
    files = transcripts.codex_export_files(None, {"thread_id": "th-1"})
    assert files == [{"name": "codex/sessions/2026/12/07/rollout-2026-12-07T13-00-00-th-1.jsonl",
                      "text": '{"a":1}\n'}]
    monkeypatch.setenv("CODEX_HOME", str(new))
    evil = [{"name": "codex/sessions/../../escape.jsonl", "text": "x"}, {"name": "other/x", "text": "y"}]
    transcripts.codex_import_files(None, {"thread_id": "th-1"}, files + evil)
    written = [os.path.relpath(os.path.join(d, f), new) for d, _, fs in os.walk(new) for f in fs]
    assert written == ["sessions/2026/12/07/rollout-2026-12-07T13-00-00-th-1.jsonl"]
    assert not os.path.exists(tmp_path / "escape.jsonl")
    assert transcripts.codex_export_files(None, {"thread_id": None}) == []


def test_c23_qwen_records_name_the_new_workspace_and_pi_files_stay_the_sessions(tmp_path, monkeypatch):
    old_cwd = "/old/place"
    text = (
        f'{{"cwd":"{old_cwd}","a":1}}\n'
        'not json\n'
        f'{{"cwd":"{old_cwd}","b":2}}\n'
        '{"cwd":"/elsewhere"}\n'
    )
    moved = transcripts._moved_cwd(text, "/new/place")
    assert moved.splitlines() == [
        '{"cwd":"/new/place","a":1}', "not json", '{"cwd":"/new/place","b":2}', '{"cwd":"/elsewhere"}',
    ]
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(tmp_path / "pi"))
    monkeypatch.chdir(tmp_path)
    files = [{"name": "pi/2026-12-07T13-00-00-000Z_s-1.jsonl", "text": "{}\n"},
             {"name": "pi/2026-12-07T13-00-00-000Z_other.jsonl", "text": "{}\n"},
             {"name": "pi/../../x_s-1.jsonl", "text": "{}\n"}]
    transcripts.pi_import_files(None, {"session_id": "s-1"}, files)
    written = [f for _, _, fs in os.walk(tmp_path / "pi") for f in fs]
    assert written == ["2026-12-07T13-00-00-000Z_s-1.jsonl"]
    assert transcripts.pi_export_files(None, {"session_id": "s-1"}) == files[:1]

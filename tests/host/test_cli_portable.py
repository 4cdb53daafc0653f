"""C23 from the command line: ``bridge-client export STATE_FILE OUT`` and ``bridge-client
restore EXPORT --sandbox NEW [PROMPT...]``. Real CLI processes, real bridges, real files."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from host_support import kill_all_under

pytestmark = pytest.mark.timeout(120)


def cli(*args, timeout=60):
    return subprocess.run(
        [sys.executable, "-m", "bridge_client.cli", *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture
def new_folder(tmp_path, home):
    folder = tmp_path / "new-sandbox"
    folder.mkdir()
    yield str(folder)
    kill_all_under(str(folder))


def _error_line(done, status):
    assert done.returncode == status, done
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bridge-client: error:"), done.stderr
    return lines[0]


def test_c23_cli_export_then_restore_runs_the_next_turn(workspace, new_folder, tmp_path):
    state = str(tmp_path / "turn.json")
    out = str(tmp_path / "chat.export")
    done = cli("run", "first words", "--agent", "echo", "--sandbox", workspace, "--state", state)
    assert done.returncode == 0, done.stderr
    done = cli("export", state, out)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == out
    assert f"bridge-client restore {out} --sandbox NEW" in done.stderr
    header = json.loads(open(out, "rb").readline())
    assert header["format"] == "bridge-client-session"
    done = cli("restore", out, "next words", "--sandbox", new_folder, "--json")
    assert done.returncode == 0, done.stderr
    parts = [json.loads(line) for line in done.stdout.splitlines()]
    assert parts[0]["type"] == "turn-start" and parts[-1]["type"] == "turn-finish"
    assert "next words" in "".join(p.get("text", "") for p in parts if p["type"] == "text-delta")
    session_id = json.load(open(state))["sessionId"]
    assert parts[0]["turn"]["sessionId"] == session_id
    assert "restored into" in done.stderr
    # The same export again: imported once, so the command runs one more turn of the session.
    done = cli("restore", out, "more words", "--sandbox", new_folder, "--json")
    assert done.returncode == 0, done.stderr
    parts = [json.loads(line) for line in done.stdout.splitlines()]
    assert parts[0]["turn"]["sessionId"] == session_id
    assert "more words" in "".join(p.get("text", "") for p in parts if p["type"] == "text-delta")


def test_c23_cli_restore_bad_input_is_one_line(workspace, new_folder, tmp_path):
    state = str(tmp_path / "turn.json")
    out = str(tmp_path / "chat.export")
    assert cli("run", "x", "--agent", "echo", "--sandbox", workspace, "--state", state).returncode == 0
    assert cli("export", state, out).returncode == 0
    line = _error_line(cli("restore", out, "go", "--sandbox", new_folder, "--agent", "shell"), 1)
    assert "echo agent" in line and "shell" in line
    line = _error_line(cli("restore", out, "go"), 2)
    assert "--sandbox" in line
    data = open(out, "rb").read()
    open(out, "wb").write(data[:-20])
    line = _error_line(cli("restore", out, "--sandbox", new_folder), 1)
    assert "truncated" in line
    line = _error_line(cli("export", state, str(tmp_path / "no-such" / "x.export")), 2)
    assert "does not exist" in line


def test_c23_cli_run_journal_then_the_sandbox_is_gone_prints_the_restore_command(
    workspace, new_folder, tmp_path, home
):
    """``run --journal``: the session's journal is kept; once the sandbox is gone, ``continue``
    says so with the one command to paste, and that command brings the session back."""
    import os
    import shutil
    import shlex

    state = str(tmp_path / "turn.json")
    done = cli("run", "kept words", "--agent", "echo", "--sandbox", workspace, "--state", state, "--journal")
    assert done.returncode == 0, done.stderr
    session_id = json.load(open(state))["sessionId"]
    journal = os.path.join(home, "journals", f"{session_id}.export")
    assert os.path.isfile(journal)
    kill_all_under(workspace, grace=0.0)
    shutil.rmtree(workspace)
    line = _error_line(cli("continue", state), 2)
    command = f"bridge-client restore {shlex.quote(journal)} --sandbox NEW"
    assert line.endswith(command), line
    argv = shlex.split(command)[1:]
    argv[argv.index("NEW")] = new_folder
    done = cli(*argv[:2], "after the loss", *argv[2:], "--json")
    assert done.returncode == 0, done.stderr
    parts = [json.loads(line) for line in done.stdout.splitlines()]
    assert parts[0]["turn"]["sessionId"] == session_id
    assert "after the loss" in "".join(p.get("text", "") for p in parts if p["type"] == "text-delta")


def test_c23_cli_restore_tell_moves_the_session_away_from_the_old_sandbox(workspace, new_folder, tmp_path):
    """``--tell OLD``: the old sandbox's bridge is told where the session went; a ``continue``
    there is then refused with where it went."""
    state = str(tmp_path / "turn.json")
    out = str(tmp_path / "chat.export")
    assert cli("run", "x", "--agent", "echo", "--sandbox", workspace, "--state", state).returncode == 0
    assert cli("export", state, out).returncode == 0
    done = cli("restore", out, "--sandbox", new_folder, "--tell", workspace)
    assert done.returncode == 0, done.stderr
    line = _error_line(cli("continue", state), 1)
    assert "restored elsewhere" in line and "epoch 1" in line, line

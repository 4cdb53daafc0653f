"""The commands that finish the job from the command line: cancel a suspended turn, list the
bridges of every sandbox with their options, prune what is dead, prompts from standard input
and files; and the last-resort handler. Real CLI processes, real bridges, real files."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from bridge_client import cli as cli_module
from host_support import kill_all_under

pytestmark = pytest.mark.timeout(120)


def cli(*args, cwd=None, timeout=60, input=None):
    return subprocess.run(
        [sys.executable, "-m", "bridge_client.cli", *args],
        capture_output=True, text=True, cwd=cwd, timeout=timeout, input=input,
    )


def _error_line(done, status):
    assert done.returncode == status, done
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bridge-client: error:"), done.stderr
    return lines[0]


# ------------------------------------------------------------------------------ prompts


def test_run_reads_the_prompt_from_standard_input(workspace):
    done = cli("run", "-", "--sandbox", workspace, input="echo from-stdin > in.txt\ncat in.txt\n")
    assert done.returncode == 0, done.stderr
    assert "[shell] echo from-stdin > in.txt" in done.stdout and "from-stdin\n" in done.stdout


def test_run_reads_the_prompt_from_a_file_and_double_at_is_literal(workspace, tmp_path):
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("echo from-file\n")
    done = cli("run", f"@{prompt}", "echo @@not-a-file", "--sandbox", workspace)
    assert done.returncode == 0, done.stderr
    assert "from-file\n" in done.stdout
    assert "@@not-a-file\n" in done.stdout  # only a word that starts with @@ is unescaped
    done = cli("run", "@@literal", "--agent", "echo", "--sandbox", workspace)
    assert done.returncode == 0 and "@literal" in done.stdout


def test_run_refuses_a_10_mb_prompt_naming_the_4_mib_limit(workspace, tmp_path):
    big = tmp_path / "big.txt"
    big.write_bytes(b"x" * 10_000_000)
    line = _error_line(cli("run", f"@{big}", "--sandbox", workspace), 2)
    assert "10000000 bytes" in line and "4 MiB" in line
    line = _error_line(cli("run", "-", "--sandbox", workspace, input="x" * 10_000_000), 2)
    assert "standard input" in line and "4 MiB" in line
    # Refused before anything started: no sandbox state, no bridge.
    assert not os.path.isdir(os.path.join(os.environ["BRIDGE_CLIENT_HOME"], "sandboxes"))


def test_run_names_a_missing_prompt_file(workspace, tmp_path):
    line = _error_line(cli("run", f"@{tmp_path / 'nope.txt'}", "--sandbox", workspace), 2)
    assert "cannot read the prompt file" in line and "nope.txt" in line


# ------------------------------------------------------------------------------ cancel


def _suspended_sleep(workspace):
    """Run ``sleep 60`` in the shell agent, Ctrl-C it once it runs; return the state file."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bridge_client.cli", "run", "sleep 60", "--sandbox", workspace],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("[shell] sleep 60"), line
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 130, err
    words = err.strip().splitlines()[-1].split()
    assert words[:2] == ["bridge-client", "continue"], err
    return words[2]


def test_cancel_cancels_a_suspended_turn_and_a_second_cancel_says_it_finished(workspace):
    state_file = _suspended_sleep(workspace)
    done = cli("cancel", state_file)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"cancelled turn {os.path.basename(state_file)[:-5]}"
    rows = [json.loads(line) for line in cli("bridges", "--sandbox", workspace, "--json").stdout.splitlines()]
    assert [r["running"] for r in rows] == [0]
    again = cli("cancel", state_file)
    assert again.returncode == 0, again.stderr
    assert "had already finished (cancelled)" in again.stdout


def test_cancel_never_reruns_a_turn_whose_bridge_is_gone(workspace, tmp_path):
    state = {
        "protocol": 1, "agentId": "shell", "bridgeId": "0" * 32, "sessionId": "s-1",
        "turnId": "t-1", "prompt": "touch ran.txt", "startedAt": "2026-01-01T00:00:00Z",
        "sandbox": workspace,
    }
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state))
    line = _error_line(cli("cancel", str(path)), 1)
    assert "nothing runs there to cancel" in line
    assert not os.path.exists(os.path.join(workspace, "ran.txt"))


# ------------------------------------------------------------------------------ bridges --all


def test_bridges_all_lists_every_sandbox_with_an_options_column(workspace, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    try:
        assert cli("run", "true", "--sandbox", workspace).returncode == 0
        assert cli("run", "true", "--sandbox", workspace, "--option", "keep_going=true").returncode == 0
        assert cli("run", "hi", "--agent", "echo", "--sandbox", str(other)).returncode == 0
        done = cli("bridges", "--all")
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert lines[0].split()[:4] == ["SANDBOX", "BRIDGE", "ID", "AGENT"] and "OPTIONS" in lines[0]
        shell_rows = [line for line in lines[1:] if " shell " in line]
        assert len(shell_rows) == 2
        assert all(line.startswith(os.path.realpath(workspace)) for line in shell_rows)
        assert any('{"keep_going":true}' in line for line in shell_rows)
        assert any(line.startswith(os.path.realpath(other)) and " echo " in line for line in lines)
        rows = [json.loads(line) for line in cli("bridges", "--all", "--json").stdout.splitlines()]
        assert sorted(str(r["options"]) for r in rows) == ["None", "None", "{'keep_going': True}"]
        assert _error_line(cli("bridges", "--all", "--sandbox", workspace), 2).endswith("not both")
    finally:
        kill_all_under(str(other))


def test_bridges_all_shows_the_folder_of_a_dead_bridge(workspace, home):
    assert cli("run", "hi", "--agent", "echo", "--sandbox", workspace).returncode == 0
    listed = cli("bridges", "--sandbox", workspace, "--json").stdout.splitlines()
    (row,) = [json.loads(line) for line in listed]
    assert cli("stop", row["id"], "--sandbox", workspace).returncode == 0
    rows = [json.loads(line) for line in cli("bridges", "--all", "--json").stdout.splitlines()]
    folder = os.path.realpath(workspace)
    assert [(r["id"], r["alive"], r["sandbox"]) for r in rows] == [(row["id"], False, folder)]
    table = cli("bridges", "--all").stdout.splitlines()
    assert table[1].startswith(folder), table
    # Pruned, the sandbox's state root goes whole, the record of its folder with it.
    assert cli("prune", "--min-age", "0").returncode == 0
    assert os.listdir(os.path.join(home, "sandboxes")) == []


# ------------------------------------------------------------------------------ prune


def test_prune_removes_dead_bridges_and_finished_turns_state_and_dry_run_removes_nothing(workspace, home):
    state_file = _suspended_sleep(workspace)
    assert cli("cancel", state_file).returncode == 0
    assert cli("run", "hi", "--agent", "echo", "--sandbox", workspace).returncode == 0
    listed = cli("bridges", "--sandbox", workspace, "--json").stdout.splitlines()
    rows = {r["agent"]: r for r in map(json.loads, listed)}
    # The echo bridge keeps running; the shell bridge is stopped: its state dir is dead.
    assert cli("stop", rows["shell"]["id"], "--sandbox", workspace).returncode == 0
    bridges = os.path.join(home, "sandboxes")
    dry = cli("prune", "--dry-run", "--min-age", "0")
    assert dry.returncode == 0, dry.stderr
    assert f"would remove turn state {state_file}" in dry.stdout
    assert rows["shell"]["id"] in dry.stdout and rows["echo"]["id"] not in dry.stdout
    assert os.path.exists(state_file)
    assert any(rows["shell"]["id"] in dirs for _, dirs, _ in os.walk(bridges))
    # A young state directory is kept by default (a host may be launching a bridge there).
    assert rows["shell"]["id"] not in cli("prune", "--dry-run").stdout
    done = cli("prune", "--min-age", "0")
    assert done.returncode == 0, done.stderr
    assert f"removed turn state {state_file}" in done.stdout
    assert not os.path.exists(state_file)
    left = [d for _, dirs, _ in os.walk(bridges) for d in dirs]
    assert rows["shell"]["id"] not in left and rows["echo"]["id"] in left
    assert cli("prune", "--min-age", "0").stdout.startswith("nothing to prune")
    assert cli("run", "hi again", "--agent", "echo", "--sandbox", workspace).returncode == 0


def test_prune_removes_every_dead_folder_of_one_bridge_id_in_one_run(home):
    # The same bridge id (same options and token) has a state directory in each sandbox.
    bridge_id = "0" * 32
    made = []
    for n in range(3):
        folder = os.path.join(home, "sandboxes", f"local-{n:016x}", "bridges", bridge_id)
        os.makedirs(folder, mode=0o700)
        with open(os.path.join(folder, "launch.json"), "w") as f:
            f.write("{}")
        made.append(folder)
    done = cli("prune", "--min-age", "0")
    assert done.returncode == 0, done.stderr
    assert [folder for folder in made if os.path.exists(folder)] == []
    assert cli("prune", "--min-age", "0").stdout.startswith("nothing to prune")


def _dead_sandbox(home, folder, bridge_id):
    """A local folder's state root with a dead bridge's state directory and a template mark."""
    from bridge_client.sandbox.local import LocalSandbox

    root = os.path.join(home, "sandboxes", LocalSandbox.id_for(folder))
    state = os.path.join(root, "bridges", bridge_id)
    os.makedirs(state, mode=0o700)
    with open(os.path.join(state, "launch.json"), "w") as f:
        f.write("{}")
    os.makedirs(os.path.join(root, "template-marks"), mode=0o700)
    with open(os.path.join(root, "template-marks", "0" * 64), "w") as f:
        f.write("{}")
    return root


def test_prune_sandbox_limits_it_to_one_folder_and_template_marks_go_too(home, tmp_path):
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    os.makedirs(one)
    os.makedirs(two)
    root_one, root_two = _dead_sandbox(home, one, "1" * 32), _dead_sandbox(home, two, "2" * 32)
    dry = cli("prune", "--sandbox", one, "--min-age", "0", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "1" * 32 in dry.stdout and "2" * 32 not in dry.stdout, dry.stdout
    assert f"would remove template marks {os.path.join(root_one, 'template-marks')}" in dry.stdout
    done = cli("prune", "--sandbox", one, "--min-age", "0")
    assert done.returncode == 0, done.stderr
    assert not os.path.exists(root_one), "the bridge state, the marks, then the emptied root go"
    assert os.path.isdir(os.path.join(root_two, "bridges", "2" * 32))
    assert os.path.isdir(os.path.join(root_two, "template-marks"))
    assert cli("prune", "--min-age", "0").returncode == 0
    assert not os.path.exists(root_two)
    refused = cli("prune", "--sandbox", "docker:python:3.12")
    assert refused.returncode == 2 and "local folders only" in refused.stderr


# ------------------------------------------------------------------------------ last resort


def test_an_unexpected_error_is_one_line_and_exit_70_never_a_traceback(monkeypatch, capsys, home):
    def broken(args):
        raise RuntimeError("something inside broke")

    monkeypatch.setattr(cli_module.bridges, "_cmd_bridges", broken)
    assert cli_module.main(["bridges", "--all"]) == cli_module.INTERNAL_ERROR == 70
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip() == (
        "bridge-client: error: unexpected RuntimeError: something inside broke; "
        "this is a bug in bridge-client: -v logs the details"
    )

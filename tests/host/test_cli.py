"""The bridge-client command, run as a user runs it: a real process, real output."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from host_support import wait_until

pytestmark = pytest.mark.timeout(90)


def cli(*args, cwd=None, timeout=60):
    return subprocess.run(
        [sys.executable, "-m", "bridge_client.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
    )


def _one_line_error(done):
    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bridge-client: error:"), done.stderr
    return lines[0]


def test_run_streams_a_shell_turn(workspace):
    done = cli("run", "echo made > out.txt", "cat out.txt", "--sandbox", workspace)
    assert done.returncode == 0, done.stderr
    assert "made\n" in done.stdout
    assert "[shell] cat out.txt" in done.stdout
    assert done.stdout.rstrip().splitlines()[-1] == "[finished] stop"
    with open(os.path.join(workspace, "out.txt")) as f:
        assert f.read() == "made\n"


def test_run_json_prints_one_part_per_line(workspace):
    done = cli(
        "run", "hello world", "--agent", "echo", "--option", "steps=2", "--sandbox", workspace, "--json"
    )
    assert done.returncode == 0, done.stderr
    parts = [json.loads(line) for line in done.stdout.splitlines()]
    assert parts[0]["type"] == "turn-start" and parts[-1]["type"] == "turn-finish"
    assert [p["index"] for p in parts] == list(range(len(parts)))
    assert "".join(p["text"] for p in parts if p["type"] == "text-delta") == "hello world" * 2


def test_run_failing_command_exits_non_zero_and_says_it_once(workspace):
    done = cli("run", "exit 3", "--sandbox", workspace)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stdout.rstrip().splitlines()[-1].startswith("[finished] error: command exited with status 3")
    assert "status 3" not in done.stderr, "the error is not repeated on stderr"
    as_json = cli("run", "exit 3", "--sandbox", workspace, "--json")
    assert as_json.returncode == 1
    assert as_json.stderr.strip().splitlines()[-1].startswith("bridge-client: turn finished with error")


def test_run_in_the_current_folder_by_default(workspace):
    done = cli("run", "pwd", cwd=workspace)
    assert done.returncode == 0, done.stderr
    assert os.path.realpath(workspace) in done.stdout


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["run", "x", "--agent", "nonsense"], "unknown agent"),
        (["run", "x", "--agent", "no_such_module_xyz:make"], "cannot load agent"),
        (["run", "x", "--option", "novalue"], "KEY=VALUE"),
        (["run", "x", "--option", "=3"], "KEY=VALUE"),
        (["run", "x", "--sandbox", "/no/such/folder/anywhere"], "does not exist"),
        (["run"], "required"),
        (["frobnicate"], "invalid choice"),
        (["continue", "/no/such/turn.json"], "cannot read"),
    ],
)
def test_bad_input_gives_one_line_and_exit_2(workspace, args, fragment):
    if "--sandbox" not in args and args[0] == "run":
        args = [*args, "--sandbox", workspace]
    line = _one_line_error(cli(*args))
    assert fragment in line


def test_env_with_an_empty_name_says_the_name_is_empty(workspace):
    line = _one_line_error(cli("run", "x", "--sandbox", workspace, "--env", "=secret-value"))
    assert "name is empty" in line and "secret-value" not in line, line


def test_continue_of_a_missing_file_says_it_takes_a_turn_state_file_and_where_they_are(workspace, tmp_path):
    home = str(tmp_path / "home")
    done = subprocess.run(
        [sys.executable, "-m", "bridge_client.cli", "continue", "bogus-id", "--sandbox", workspace],
        capture_output=True, text=True, timeout=60, cwd=workspace,
        env={**os.environ, "BRIDGE_CLIENT_HOME": home},
    )
    line = _one_line_error(done)
    assert "cannot read bogus-id" in line and "turn state file" in line, line
    assert os.path.join(home, "turns") in line, line


def test_list_is_bridges(workspace):
    assert cli("run", "hi", "--agent", "echo", "--sandbox", workspace).returncode == 0
    by_bridges = cli("bridges", "--sandbox", workspace, "--json")
    by_list = cli("list", "--sandbox", workspace, "--json")
    assert by_list.returncode == 0, by_list.stderr
    ids = [json.loads(line)["id"] for line in by_list.stdout.splitlines()]
    assert ids and ids == [json.loads(line)["id"] for line in by_bridges.stdout.splitlines()]


def test_continue_rejects_a_file_that_is_not_a_turn_state(workspace, tmp_path):
    bad = tmp_path / "state.json"
    bad.write_text('{"protocol": 1}')
    assert "not a turn state" in _one_line_error(cli("continue", str(bad), "--sandbox", workspace))


def test_bridges_lists_and_stop_stops(workspace):
    assert cli("run", "hi", "--agent", "echo", "--sandbox", workspace).returncode == 0
    listed = cli("bridges", "--sandbox", workspace, "--json")
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert len(rows) == 1
    row = rows[0]
    assert row["agent"] == "echo" and row["alive"] is True and row["sessions"] == 1 and row["turns"] == 1
    table = cli("bridges", "--sandbox", workspace)
    assert row["id"] in table.stdout and "ALIVE" in table.stdout
    stopped = cli("stop", row["id"], "--sandbox", workspace)
    assert stopped.returncode == 0, stopped.stderr
    assert wait_until(
        lambda: (
            not os.path.exists(f"/proc/{row['pid']}")
            or open(f"/proc/{row['pid']}/stat").read().split()[2] == "Z"
        )
    )
    after = [
        json.loads(line) for line in cli("bridges", "--sandbox", workspace, "--json").stdout.splitlines()
    ]
    assert after[0]["alive"] is False
    again = cli("stop", row["id"], "--sandbox", workspace)  # already stopped: nothing to do
    assert again.returncode == 0 and "is not running" in again.stdout, again


def test_version():
    done = cli("--version")
    assert done.returncode == 0 and done.stdout.strip() == "bridge-client 0.1.0"


@pytest.mark.parametrize("option", ["steps=abc", "steps=-1", "bogus=1"])
def test_bad_agent_option_is_bad_input_and_launches_nothing(workspace, home, option):
    line = _one_line_error(cli("run", "hi", "--agent", "echo", "--option", option, "--sandbox", workspace))
    assert "agent 'echo'" in line
    assert not os.path.exists(os.path.join(home, "sandboxes")), "no bridge state was created"


@pytest.mark.parametrize("prompt", ["", "   "])
def test_empty_prompt_is_bad_input(workspace, prompt):
    assert "empty" in _one_line_error(cli("run", prompt, "--sandbox", workspace))


def test_ctrl_c_suspends_and_the_printed_command_continues_the_turn(workspace):
    import shlex
    import signal

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bridge_client.cli",
            "run",
            "a b",
            "--agent",
            "echo",
            "--option",
            "steps=6",
            "--option",
            "delay=0.05",
            "--sandbox",
            workspace,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = proc.stdout.readline()  # the first tool call: the turn is being read
        assert first.startswith("[echo]"), first
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    command = err.strip().splitlines()[-1].strip()
    words = shlex.split(command)
    assert words[:2] == ["bridge-client", "continue"] and "--sandbox" in words and "delay=0.05" in words
    done = cli(*words[1:])
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().splitlines()[-1] == "[finished] stop"


def test_closed_stdout_is_not_a_traceback(workspace):
    done = subprocess.run(
        f"{sys.executable} -m bridge_client.cli run hi --agent echo --sandbox {workspace} >&-",
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Traceback" not in done.stderr
    assert done.returncode in (0, 1)


def test_stop_refuses_a_bad_id_and_a_stale_file_naming_another_process(workspace, home):
    assert "not a bridge id" in _one_line_error(cli("stop", "../../etc", "--sandbox", workspace))
    assert cli("run", "hi", "--agent", "echo", "--sandbox", workspace).returncode == 0
    row = json.loads(cli("bridges", "--sandbox", workspace, "--json").stdout.splitlines()[0])
    assert cli("stop", row["id"], "--sandbox", workspace).returncode == 0
    # A stale listening file whose pid now belongs to an unrelated process: nothing is killed.
    import bridge_client as bc
    from bridge_client.state_dir import identity

    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        sandbox = bc.LocalSandbox(workspace)
        path = os.path.join(identity.state_dir(sandbox.state_root, row["id"]), identity.LISTENING_FILE)
        stale = identity.ListeningInfo(
            1, "echo", row["id"], "127.0.0.1", row["port"], victim.pid, "old", "2020-01-01T00:00:00.000Z"
        )
        identity.secure_write(path, stale.to_json().encode())
        done = cli("stop", row["id"], "--sandbox", workspace)
        assert done.returncode == 0 and "is not running" in done.stdout, done
        assert "stale" in done.stdout or "another program" in done.stdout
        assert victim.poll() is None, "the unrelated process was not signalled"
    finally:
        victim.kill()
        victim.wait()


def test_two_quick_ctrl_c_still_suspend_cleanly(workspace):
    import signal

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bridge_client.cli",
            "run",
            "a b",
            "--agent",
            "echo",
            "--option",
            "steps=20",
            "--option",
            "delay=0.05",
            "--sandbox",
            workspace,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().startswith("[echo]")
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "bridge-client continue" in err

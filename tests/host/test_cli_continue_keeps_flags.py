"""The installed package's command line: the
command printed to continue a suspended ``run --json`` keeps ``--json``. Real processes,
a real bridge, real files."""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys

import pytest

from bridge_client.cli.stream import continue_command

pytestmark = pytest.mark.timeout(120)


def _args(**given):
    base = dict(sandbox=".", agent="shell", option=None, approve=None, env=None, json=False)
    base.update(given)
    return argparse.Namespace(**base)


def test_the_continue_command_keeps_json_and_approve():
    words = shlex.split(continue_command("/s/t.json", _args(json=True, approve="all"), 2))
    assert words[:3] == ["bridge-client", "continue", "/s/t.json"]
    assert "--json" in words and words[words.index("--approve") + 1] == "all"
    assert "--json" not in shlex.split(continue_command("/s/t.json", _args(), 0))


def test_a_suspended_json_run_continues_as_json(workspace):
    env = dict(os.environ)
    proc = subprocess.Popen(
        [sys.executable, "-m", "bridge_client.cli", "run", "a b", "--agent", "echo", "--json",
         "--option", "steps=6", "--option", "delay=0.05", "--sandbox", workspace],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        first = proc.stdout.readline()
        assert json.loads(first)["type"] == "turn-start"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 130, err
    words = shlex.split(err.strip().splitlines()[-1])
    assert words[:2] == ["bridge-client", "continue"] and "--json" in words
    done = subprocess.run(
        [sys.executable, "-m", "bridge_client.cli", *words[1:]],
        capture_output=True, text=True, env=env, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    parts = [json.loads(line) for line in done.stdout.splitlines()]  # every line is JSON
    assert parts[0]["type"] == "turn-start" and parts[-1]["type"] == "turn-finish"


def test_a_sandbox_folder_made_again_at_its_path_is_worked_in(workspace):
    # rm -rf repo && mkdir repo (or a fresh clone there): the client finds the bridge of that
    # path, launched in the removed folder; it works in the new one, not in a dead directory.
    import shutil

    import bridge_client as bc

    options = bc.bridge_options("shell", bridge_idle_timeout=60)
    with bc.create_session(options, bc.LocalSandbox(workspace)) as session:
        first = session.turn("touch old")
        assert [p.type for p in first][-1] == "turn-finish" and first.finish.finish_reason == "stop"
        shutil.rmtree(workspace)
        gone = session.turn("echo hi")
        list(gone)
        assert gone.finish.finish_reason == "error"
        assert "workspace folder was removed" in gone.finish.error, gone.finish.error
        os.mkdir(workspace)
        again = session.turn("touch new\nls")
        list(again)
        assert again.finish.finish_reason == "stop", again.finish.error
        assert again.text() == "new\n"
    assert os.path.exists(os.path.join(workspace, "new"))


COMMANDS = ["run", "continue", "cancel", "answer", "say", "bridges", "stop", "prune"]


@pytest.mark.parametrize("command", COMMANDS)
def test_each_help_fits_a_terminal(command):
    done = subprocess.run(
        [sys.executable, "-m", "bridge_client.cli", command, "--help"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "80"},
    )
    assert done.returncode == 0, done.stderr
    long = [line for line in done.stdout.splitlines() if len(line) > 100]
    assert not long, long
    if command == "continue":
        assert "--steps K" in done.stdout  # as the command line guide writes it


def test_a_prompt_read_from_the_terminal_says_how_to_end_it(workspace):
    import pty
    import select
    import time

    pid, fd = pty.fork()
    if pid == 0:  # the child: the command, its standard input a terminal
        os.execv(sys.executable, [sys.executable, "-m", "bridge_client.cli", "run", "-",
                                  "--agent", "echo", "--sandbox", workspace])
    seen, deadline, sent = b"", time.monotonic() + 60, False
    try:
        while time.monotonic() < deadline:
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    data = os.read(fd, 4096)
                except OSError:
                    break
                if not data:
                    break
                seen += data
            if not sent and b"Ctrl-D" in seen:
                os.write(fd, b"hello there\n\x04")
                sent = True
            if os.waitpid(pid, os.WNOHANG)[0]:
                pid = 0
                break
    finally:
        if pid:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)
    text = re.sub(r"\x1b\[[0-9;]*m", "", seen.decode(errors="replace"))  # colour: a terminal
    assert sent, text
    assert "hello there" in text.split("Ctrl-D", 1)[1] and "[finished] stop" in text, text


def _cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "bridge_client.cli", *args],
        capture_output=True, text=True, timeout=60, env=env or dict(os.environ),
    )


def test_a_bridge_of_a_removed_sandbox_folder_is_listed_and_stopped(workspace, tmp_path):
    # mkdir g; bridge-client run ... --sandbox g; rm -rf g: its bridge runs on (until idle),
    # and `bridges`/`stop --sandbox g` find it by the id the path had.
    import shutil
    import time

    done = _cli("run", "echo a", "--agent", "shell", "--sandbox", workspace)
    assert done.returncode == 0, done.stderr
    listing = _cli("bridges", "--sandbox", workspace, "--json").stdout
    rows = [json.loads(line) for line in listing.splitlines()]
    assert len(rows) == 1 and rows[0]["alive"], rows
    pid = rows[0]["pid"]
    shutil.rmtree(workspace)
    listed = _cli("bridges", "--sandbox", workspace, "--json")
    assert listed.returncode == 0, listed.stderr
    assert [json.loads(line)["pid"] for line in listed.stdout.splitlines()] == [pid]
    stopped = _cli("stop", "--all", "--sandbox", workspace)
    assert stopped.returncode == 0, stopped.stderr
    assert f"pid {pid}" in stopped.stdout, stopped.stdout
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the listening file goes first, then the process
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        pytest.fail(f"bridge pid {pid} still runs after stop")
    never = _cli("stop", "--all", "--sandbox", str(tmp_path / "never-was"))
    assert never.returncode == 2 and "does not exist" in never.stderr, never.stderr


def test_an_unusable_state_directory_is_named_with_its_variable(tmp_path, monkeypatch):
    # A home under a file: the library's error names the folder and the variable that sets
    # it (of the OSError's own type), and the CLI says so once.
    from bridge_client.paths import default_secret

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    home = str(blocker / "home")
    monkeypatch.setenv("BRIDGE_CLIENT_HOME", home)
    monkeypatch.delenv("BRIDGE_CLIENT_SECRET", raising=False)
    with pytest.raises(OSError) as caught:  # FileExistsError: a file where a folder must be
        default_secret()
    assert "BRIDGE_CLIENT_HOME" in str(caught.value) and home in str(caught.value)
    done = _cli("run", "echo a", "--agent", "shell", "--sandbox", str(tmp_path), env=dict(os.environ))
    assert done.returncode != 0
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("bridge-client: error: cannot use the state directory"), done.stderr
    assert line.count("BRIDGE_CLIENT_HOME") == 1, line

"""The installed package's command line: bad input a
user gives the command line. Real processes, real files."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from host_support import _alive

pytestmark = pytest.mark.timeout(120)


def _sh(script: str, *args: str) -> subprocess.CompletedProcess:
    """Run ``script`` with ``sh -c`` ($0 is this Python), so a test can close or redirect the
    command's standard input as a shell does."""
    return subprocess.run(
        ["sh", "-c", script, sys.executable, *args],
        capture_output=True, text=True, timeout=60, env=dict(os.environ),
    )


@pytest.mark.parametrize("command", ["run", "say"])
def test_a_closed_standard_input_is_bad_input(command, workspace, tmp_path):
    # `bridge-client run - <&-` (a cron job, a service with stdin closed): Python has no
    # sys.stdin then; before, this was exit 70 ("a bug": 'NoneType' has no attribute 'buffer').
    state = tmp_path / "t.json"
    state.write_text("{}")
    words = ["run", "-", "--sandbox", workspace] if command == "run" else ["say", str(state), "-"]
    done = _sh('exec "$0" -m bridge_client.cli "$@" <&-', *words)
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("bridge-client: error: ") and "standard input" in line, done.stderr
    assert "closed" in line and "bug" not in line, line
    assert os.listdir(workspace) == []  # nothing started


def test_a_standard_input_that_cannot_be_read_is_bad_input(workspace, tmp_path):
    # Standard input opened for writing only (`0>file`): the read fails with EBADF; before,
    # the error was a bare "Bad file descriptor" with exit status 1.
    out = tmp_path / "w"
    done = _sh('exec "$0" -m bridge_client.cli run - --sandbox "$1" 0>"$2"', workspace, str(out))
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("bridge-client: error: cannot read the prompt on standard input"), line


def test_sigterm_during_a_cli_install_ends_the_install_and_says_so(workspace, tmp_path):
    # `timeout 60 bridge-client run --agent codex ...` on a machine without codex: the npm
    # install (in a session of its own) was left running when SIGTERM ended the command,
    # which died without a word; now SIGTERM unwinds as Ctrl-C does (exit 143, one line).
    import signal
    import time

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pid_file = tmp_path / "npm.pid"
    npm = bin_dir / "npm"
    npm.write_text(f'#!/bin/sh\necho $$ > "{pid_file}"\nexec sleep 30\n')
    npm.chmod(0o755)
    env = dict(os.environ, PATH=f"{os.path.dirname(sys.executable)}:{bin_dir}:/usr/bin:/bin")
    proc = subprocess.Popen(
        [sys.executable, "-m", "bridge_client.cli", "run", "hi", "--agent", "codex", "--sandbox", workspace],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        deadline = time.monotonic() + 30
        while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pid_file.exists(), "the fake npm never started"
        npm_pid = int(pid_file.read_text())
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    try:
        assert proc.returncode == 143, err
        assert err.strip().splitlines()[-1] == "bridge-client: stopped (SIGTERM)", err
        deadline = time.monotonic() + 10
        while _alive(npm_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(npm_pid), "the npm install still runs after the command ended"
    finally:
        if _alive(npm_pid):
            os.kill(npm_pid, signal.SIGKILL)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bridge_client.cli", *args], capture_output=True,
                          text=True, timeout=60, env=dict(os.environ), stdin=subprocess.DEVNULL)


def test_a_shell_command_that_cannot_be_started_is_its_tool_result(workspace, tmp_path):
    # A prompt file with a NUL byte, or a `shell` option naming no program: before, the turn
    # ended with Python's words ("ValueError: embedded null byte", "FileNotFoundError: [Errno
    # 2] ...") and the tool call had no result.
    prompt = tmp_path / "nul.txt"
    prompt.write_bytes(b"echo a\0b\necho after\n")
    nul = _cli("run", f"@{prompt}", "--sandbox", workspace)
    assert nul.returncode == 1, nul.stderr
    lines = nul.stdout.splitlines()
    assert lines[0] == "[shell] echo a\\x00b", lines[0]  # shown as it runs: no raw control character
    assert lines[1].startswith("[shell error]") and "NUL character" in lines[1], nul.stdout
    assert lines[-1].startswith("[finished] error: the command holds a NUL character"), nul.stdout
    assert "after" not in nul.stdout and "ValueError" not in nul.stdout + nul.stderr
    going = _cli("run", f"@{prompt}", "--option", "keep_going=true", "--sandbox", workspace)
    assert going.stdout.splitlines()[-2:] == ["[shell ok] {\"exitCode\": 0, \"timedOut\": false}",
                                             "[finished] stop"], going.stdout
    shell = _cli("run", "echo hi", "--option", "shell=/no/such/shell", "--sandbox", workspace)
    assert shell.returncode == 1, shell.stderr
    assert shell.stdout.splitlines()[-1] == (
        "[finished] error: cannot run the shell /no/such/shell: No such file or directory"), shell.stdout


def test_cancel_of_a_turn_in_a_removed_folder_says_how_to_stop_its_bridge(workspace, tmp_path):
    # rm -rf repo while the agent works there: `cancel`, `answer` and `say` said only
    # "sandbox folder ... does not exist" (exit 2), with no way shown to end what still runs.
    import shutil
    import time

    state = tmp_path / "turn.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "bridge_client.cli", "run", "sleep 30", "--state", str(state),
         "--sandbox", workspace],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=dict(os.environ),
    )
    try:
        deadline = time.monotonic() + 30
        while not state.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert state.exists(), "the run wrote no --state file"
        shutil.rmtree(workspace)
        for words in (["cancel", str(state)], ["say", str(state), "hello"]):
            done = _cli(*words)
            assert done.returncode == 1, done.stderr
            line = done.stderr.strip().splitlines()[-1]
            assert "was removed" in line and f"bridge-client stop --all --sandbox {workspace}" in line, line
    finally:
        proc.kill()
        proc.wait()
        # Also when an assertion failed: the fixture cannot find a process whose folder is gone.
        stopped = _cli("stop", "--all", "--sandbox", workspace)
    assert stopped.returncode == 0 and "stopped bridge" in stopped.stdout, stopped.stderr


def test_continue_reads_a_saved_run_json_output(workspace, tmp_path):
    # `run --json > parts.jsonl`: its first line is the turn-start part, with the turn state
    # (answer, say and cancel took it); `continue` refused it ("TurnState.protocol is missing").
    saved = tmp_path / "parts.jsonl"
    with open(saved, "w") as out:
        ran = subprocess.run([sys.executable, "-m", "bridge_client.cli", "run", "--json", "echo one",
                              "echo two", "--sandbox", workspace], stdout=out, stderr=subprocess.PIPE,
                             text=True, timeout=60, env=dict(os.environ))
    assert ran.returncode == 0, ran.stderr
    again = _cli("continue", str(saved), "--steps", "1", "--sandbox", workspace)
    assert again.returncode == 0, again.stderr
    assert "two" in again.stdout and "one" not in again.stdout.replace("[shell ok]", ""), again.stdout
    elsewhere = _cli("continue", str(saved), "--sandbox", str(tmp_path))  # not the turn's folder
    assert elsewhere.returncode == 2 and "--rerun-here" in elsewhere.stderr, elsewhere.stderr


_STUBBORN = '''
import os, threading, time

class Stubborn:
    agent_id = "stubborn"

    def run_turn(self, ctx):
        def seen():
            ctx.cancelled.wait()
            open(os.path.join(os.getcwd(), "cancel-seen"), "w").close()
        threading.Thread(target=seen, daemon=True).start()
        ctx.start_step()
        ctx.text("working\\n")
        time.sleep(20)  # ignores the cancel: the bridge ends the turn after its grace

def make(options):
    return Stubborn()
'''


def _default_sigint() -> None:
    """In the child before exec: SIGINT as a terminal gives it (not ignored, not blocked)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _run_stubborn(workspace: str, state) -> subprocess.Popen:
    """`run go --agent stubborn:make --state STATE`, once its state file is written."""
    import time

    with open(os.path.join(workspace, "stubborn.py"), "w") as f:
        f.write(_STUBBORN)
    run = subprocess.Popen(
        [sys.executable, "-m", "bridge_client.cli", "run", "go", "--agent", "stubborn:make",
         "--state", str(state), "--sandbox", workspace],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ),
    )
    deadline = time.monotonic() + 30
    while not state.exists() and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.05)
    if not state.exists():
        run.kill()
        run.wait()
        raise AssertionError("the run wrote no --state file")
    return run


def test_ctrl_c_while_cancel_waits_says_the_cancel_was_sent(workspace, tmp_path):
    # Ctrl-C while `cancel` waits for the turn to end printed only "interrupted": the user
    # could not tell that the cancel had reached the bridge (it had: the turn ends cancelled).
    import time

    state = tmp_path / "turn.json"
    run = _run_stubborn(workspace, state)
    cancel = None
    try:
        # As from a terminal: a suite started in the background (`.ci/run &`, a CI runner)
        # passes SIGINT on ignored, and `cancel` (which relies on Python's own Ctrl-C) keeps it so.
        cancel = subprocess.Popen([sys.executable, "-m", "bridge_client.cli", "cancel", str(state),
                                   "--agent", "stubborn:make"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=dict(os.environ),
                                  preexec_fn=_default_sigint)
        marker = os.path.join(workspace, "cancel-seen")
        deadline = time.monotonic() + 30
        while not os.path.exists(marker) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert os.path.exists(marker), "the driver never saw the cancel"
        seen = time.monotonic()
        with open(f"/proc/{cancel.pid}/status") as f:
            dispositions = [line.strip() for line in f if line.startswith(("SigBlk", "SigIgn", "SigCgt"))]
        cancel.send_signal(signal.SIGINT)  # within the bridge's grace (5 s): cancel still waits
        out, err = cancel.communicate(timeout=30)
        late = f"{time.monotonic() - seen:.2f} s after the marker"
        assert cancel.returncode == 130, (out, err, late, dispositions)
        line = err.strip().splitlines()[-1]
        # The driver saw the cancel; the command may still wait for its answer (then it cannot
        # know that the cancel arrived) or for the turn's end.
        assert "the cancel of turn" in line and ("was sent" in line or "may not have reached" in line), err
    finally:
        for proc in (cancel, run):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        _cli("stop", "--all", "--sandbox", workspace)


def test_a_turn_of_your_own_driver_is_cancelled_from_its_state_file_alone(workspace, tmp_path):
    # The state file named only the driver's id ("stubborn"): `cancel FILE` (and answer, say)
    # failed with "unknown agent 'stubborn'" unless --agent MODULE:CALLABLE was given again.

    state = tmp_path / "turn.json"
    run = _run_stubborn(workspace, state)
    try:
        done = _cli("cancel", str(state))
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"cancelled turn {json.loads(state.read_text())['turnId']}"
    finally:
        run.kill()
        run.wait()
        _cli("stop", "--all", "--sandbox", workspace)

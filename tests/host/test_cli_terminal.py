"""The command on a terminal and off it (issue 6, item 7): a spinner with the seconds of
silence on stderr only when stderr is a terminal; colour only when stdout is one and NO_COLOR
is not set; --json stays pure JSON; -v logs the client's DEBUG lines on stderr, before or
after the command name. Real processes, real pseudo-terminals."""
from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.timeout(90)

SPINNER = re.compile(r"\r\x1b\[K[|/\\-] [a-z ]+, \d+ s")


def _run(args, *, tty_out=False, tty_err=False, env=None, timeout=60):
    """Run bridge-client with stdout and/or stderr on a pseudo-terminal; return
    (exit status, stdout text, stderr text)."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM")}
    full_env.update(env or {})
    masters, slaves = {}, {}
    for name, wanted in (("out", tty_out), ("err", tty_err)):
        if wanted:
            masters[name], slaves[name] = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "bridge_client.cli", *args],
        stdout=slaves.get("out", subprocess.PIPE),
        stderr=slaves.get("err", subprocess.PIPE),
        stdin=subprocess.DEVNULL,
        env=full_env,
    )
    for fd in slaves.values():
        os.close(fd)
    got = {"out": b"", "err": b""}
    fds = dict(masters)
    if "out" not in masters:
        fds["out"] = proc.stdout.fileno()
    if "err" not in masters:
        fds["err"] = proc.stderr.fileno()
    deadline = time.monotonic() + timeout
    open_fds = dict(fds)
    try:
        while open_fds and time.monotonic() < deadline:
            ready, _, _ = select.select(list(open_fds.values()), [], [], 0.1)
            for name, fd in list(open_fds.items()):
                if fd in ready:
                    try:
                        data = os.read(fd, 65536)
                    except OSError:  # EIO: the terminal's other end closed
                        data = b""
                    if data:
                        got[name] += data
                    else:
                        del open_fds[name]
        status = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for fd in masters.values():
            os.close(fd)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    return status, got["out"].decode("utf-8", "replace"), got["err"].decode("utf-8", "replace")


def test_a_silent_step_shows_a_spinner_with_seconds_on_a_terminal(workspace):
    status, out, err = _run(["run", "sleep 2.5", "echo done", "--sandbox", workspace], tty_err=True)
    assert status == 0, err
    assert SPINNER.search(err), repr(err[-500:])
    assert "shell running" in err, "it says what it waits for"
    assert err.endswith("\r\x1b[K"), "the spinner's line is erased before anything else is written"
    assert "\x1b" not in out and "\r" not in out, "stdout (a pipe) gets plain text"
    assert "done\n" in out


def test_no_spinner_and_no_colour_off_a_terminal(workspace):
    status, out, err = _run(["run", "sleep 1.5", "echo done", "--sandbox", workspace])
    assert status == 0, err
    assert err == "" and "\x1b" not in out and "\r" not in out
    assert out.rstrip().splitlines()[-1] == "[finished] stop"


def test_json_stays_json_while_the_spinner_runs_on_stderr(workspace):
    status, out, err = _run(["run", "sleep 1.5", "--sandbox", workspace, "--json"], tty_err=True)
    assert status == 0, err
    parts = [json.loads(line) for line in out.splitlines()]
    assert parts[-1]["type"] == "turn-finish"
    assert SPINNER.search(err)


def test_colour_on_a_terminal_and_never_with_no_color(workspace):
    status, out, _ = _run(["run", "echo hi", "--sandbox", workspace], tty_out=True)
    assert status == 0
    assert "\x1b[32m[finished]\x1b[0m stop" in out and "\x1b[36m[shell]\x1b[0m echo hi" in out
    status, out, _ = _run(["run", "echo hi", "--sandbox", workspace], tty_out=True, env={"NO_COLOR": "1"})
    assert status == 0
    assert "\x1b" not in out and "[finished] stop" in out


def test_a_failed_turn_is_red_on_a_terminal(workspace):
    status, out, _ = _run(["run", "exit 3", "--sandbox", workspace], tty_out=True)
    assert status == 1
    assert "\x1b[31m[finished]\x1b[0m error" in out


@pytest.mark.parametrize("where", ["before", "after"])
def test_verbose_logs_the_client_on_stderr(workspace, where):
    args = ["run", "hi", "--agent", "echo", "--sandbox", workspace]
    args = ["-v", *args] if where == "before" else [*args[:1], "-v", *args[1:]]
    status, out, err = _run(args)
    assert status == 0, err
    assert "bridge-client: launching bridge" in err and "bridge-client: connected to ws://" in err
    assert "launching" not in out, "logs never go to stdout"
    status, _, err = _run(["run", "hi", "--agent", "echo", "--sandbox", workspace])
    assert err == "", "silent without -v"

"""What tripped a stranger trying the installed package (fourth round of issue 15): bad input a
user gives the command line. Real processes, real files."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

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

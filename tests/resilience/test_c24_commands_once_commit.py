"""A command run for the agent runs at most once across bridge deaths (C24) also when the
bridge dies right after the step ended, before the step's end reached the disk.

A driver must not drop what it knows of a step's commands (the keeper's records, the step
journal) before the step's ``step-finish`` is committed: a bridge SIGKILLed in between leaves
a log where the step never ended, so the next bridge runs that step again, and with the
record gone it would run the command a second time.

The window is made wide on real processes: a process of the test holds the store's write lock
(SQLite ``BEGIN IMMEDIATE``) from while the command runs, so the bridge's commits wait (their
busy timeout is far longer than the test) while its driver goes on; the bridge is SIGKILLed
once the driver dropped the record, then the holder too (SIGKILL: no checkpoint on its way
out, the store stays as the bridge left it) and the turn is read on in the next bridge."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from typing import Iterator, List

import pytest

import bridge_client as bc
from bridge_client.state_dir import identity
from host_support import options, session_options, wait_until
from resilience_support import sigkill_bridge

_HOLD = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], timeout=5.0, isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("held", flush=True)
time.sleep(60)
"""

pytestmark = pytest.mark.timeout(120)

_SLOW = (
    "echo a >> log.txt; i=0; "
    "while [ ! -e release ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; "
    "echo a >> out.txt; echo ran-a"
)


def _lines(workspace: str, name: str) -> List[str]:
    path = os.path.join(workspace, name)
    return open(path, encoding="utf-8").read().split() if os.path.exists(path) else []


def _records(state_dir: str) -> List[str]:
    """The keeper's record folders below the bridge's state directory."""
    found = []
    for root, _dirs, files in os.walk(os.path.join(state_dir, "commands")):
        if "lock" in files:
            found.append(root)
    return found


def test_c24_shell_command_of_a_step_whose_end_was_not_committed_runs_once(sandbox, workspace):
    with bc.create_session(options("shell"), session_options(sandbox, resend_window=30.0)) as session:
        turn = session.turn(_SLOW)
        state_dir = identity.state_dir(sandbox.state_root, session.bridge_id)
        parts = []
        killed = False
        for part in turn:
            parts.append(part)
            if killed or not isinstance(part, bc.ToolCall):
                continue
            assert wait_until(lambda: _lines(workspace, "log.txt") == ["a"], timeout=20)
            assert _records(state_dir), "the command runs without a record"
            with _store_held(state_dir):
                open(os.path.join(workspace, "release"), "w").close()  # the bridge's commits wait
                assert wait_until(lambda: _lines(workspace, "out.txt") == ["a"], timeout=20)
                # The step ended in the driver (its result taken); give it the moment to drop
                # the record, as it did once it thought the step complete.
                wait_until(lambda: not _records(state_dir), timeout=3)
                sigkill_bridge(sandbox, session.bridge_id)
            killed = True
    assert killed
    assert parts[-1].type == "turn-finish", parts[-1]
    assert _lines(workspace, "out.txt") == ["a"], "the step's command ran again in the next bridge"
    assert _lines(workspace, "log.txt") == ["a"]
    assert any(isinstance(p, bc.StepReset) for p in parts), "the step was not run again"
    assert wait_until(lambda: not _records(state_dir), timeout=10), "the finished turn's records stay"


def test_c24_records_of_a_turn_cut_by_a_bridge_death_go_when_it_is_cancelled(sandbox, workspace):
    # The bridge dies while the command runs; the command ends under its keeper (its record
    # holds the result); nobody continues the turn, it is cancelled: the record goes.
    with bc.create_session(options("shell"), session_options(sandbox, resend_window=30.0)) as session:
        turn = session.turn(_SLOW)
        state_dir = identity.state_dir(sandbox.state_root, session.bridge_id)
        for part in turn:
            if isinstance(part, bc.ToolCall):
                break
        assert wait_until(lambda: _lines(workspace, "log.txt") == ["a"], timeout=20)
        sigkill_bridge(sandbox, session.bridge_id)
        open(os.path.join(workspace, "release"), "w").close()
        assert wait_until(lambda: _lines(workspace, "out.txt") == ["a"], timeout=20)
        assert _records(state_dir), "the cut command's record is kept for the turn's next run"
        turn.cancel()
        parts = list(turn)
    assert parts[-1].type == "turn-finish" and parts[-1].finish_reason == "cancelled", parts[-1]
    assert wait_until(lambda: not _records(state_dir), timeout=10), "the cancelled turn's record stays"
    assert not os.listdir(os.path.join(state_dir, "commands"))
    assert _lines(workspace, "out.txt") == ["a"]


@contextlib.contextmanager
def _store_held(state_dir: str) -> Iterator[None]:
    """The bridge's store write-locked by a process of the test for the block (SIGKILLed by
    pid after it: no checkpoint on its way out)."""
    hold = subprocess.Popen(
        [sys.executable, "-c", _HOLD, os.path.join(state_dir, identity.STORE_FILE)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert hold.stdout is not None and hold.stdout.readline() == "held\n"
        yield
    finally:
        hold.kill()
        hold.wait(10)

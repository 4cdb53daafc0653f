"""An agent CLI's tool call whose result the driver journaled is given back, never asked of
the agent again (C24), also when the bridge dies after the CLI's run ended and before the
turn's last parts reached the disk.

The ``claude-code`` driver (a real bridge, SIGKILLed by pid; the fake ``claude`` of
tests/drivers/fake_cli.py) journals each tool call of the turn
(``drivers/cli_tools_once.py``). A bridge SIGKILLed before the turn's steps are committed
leaves a log where they never ended, so the next bridge runs the turn again from its last
committed step: the journal is what tells it (and the agent) that the tool ran. It must not
be dropped when the CLI's run ends, only once the turn's end is committed.

The window is made wide: a process of the test holds the store's write lock (SQLite
``BEGIN IMMEDIATE``) while the fake CLI prints its tool call, the result and its last
answer, so the bridge's commits wait while its driver goes on; the bridge is SIGKILLed once
the run ended (the driver done with its journal), then the holder (SIGKILL: no checkpoint)."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
from typing import Iterator

import pytest

import bridge_client as bc
from bridge_client.state_dir import identity
from host_support import options, session_options, wait_until
from test_driver_claude_code import INIT, assistant, result, tool_result

pytestmark = pytest.mark.timeout(60)

_HOLD = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], timeout=5.0, isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("held", flush=True)
time.sleep(60)
"""


@contextlib.contextmanager
def _store_held(state_dir: str) -> Iterator[None]:
    hold = subprocess.Popen(
        [sys.executable, "-c", _HOLD, os.path.join(state_dir, identity.STORE_FILE)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert hold.stdout is not None and hold.stdout.readline() == "held\n"
        yield
    finally:
        hold.kill()  # by pid
        hold.wait(10)


def _journaled(path: str, call_id: str) -> bool:
    try:
        with open(path, encoding="utf-8") as f:
            calls = json.load(f).get("calls", [])
    except (OSError, ValueError):
        return False
    return any(c.get("id") == call_id and "output" in c for c in calls)


def _cut_after_the_run(sandbox, fake_cli):
    """One try: the turn, its store held from the text before the tool call, the bridge
    SIGKILLed once the driver journaled the tool's result. Returns ``(killed, parts)``;
    ``killed`` is False when the driver's own commit waited on the held lock before it
    journaled the result (a part it emitted alone is committed in its own thread), so the
    window was not set up: the hold is let go and the turn read to its end."""
    with bc.create_session(options("claude-code"), session_options(sandbox, resend_window=30.0)) as session:
        turn = session.turn("Append the line")
        state_dir = identity.state_dir(sandbox.state_root, session.bridge_id)
        journal = os.path.join(state_dir, "cli-tools")
        path = os.path.join(journal, f"{hashlib.sha256(session.id.encode()).hexdigest()[:32]}.json")
        parts = []
        killed = False
        for part in turn:
            parts.append(part)
            if killed or not (part.type == "text-delta" and part.text == "append it."):
                continue
            pid = session._hello.pid
            with _store_held(state_dir):
                open(os.path.join(fake_cli.folder, "go"), "w").close()
                if not wait_until(lambda: _journaled(path, "toolu_1"), timeout=10):
                    killed = None  # not set up: let the turn end, then try again
                    continue
                # The run ends; give the driver the moment to drop its journal, as it did
                # once the CLI's run ended.
                wait_until(lambda: not os.listdir(journal), timeout=3)
                os.kill(pid, 9)  # the bridge, by pid
            killed = True
    return bool(killed), parts


def test_c24_claude_code_tool_of_a_run_whose_end_was_not_committed_is_given_back(sandbox, fake_cli):
    first = {
        "lines": [
            INIT,
            assistant("msg_0", {"type": "text", "text": "Let me "}),
            assistant("msg_0", {"type": "text", "text": "append it."}),
            {"__wait_file__": "go"},
            assistant("msg_1", {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}),
            tool_result("toolu_1", "appended-42"),
            assistant("msg_2", {"type": "text", "text": "The line is there."}),
            result(),
        ],
    }
    again = {"lines": [INIT, assistant("msg_3", {"type": "text", "text": "Done."}), result()]}
    for _attempt in range(3):
        os.makedirs(fake_cli.folder, exist_ok=True)
        for name in ("go", "calls.jsonl"):
            if os.path.exists(os.path.join(fake_cli.folder, name)):
                os.unlink(os.path.join(fake_cli.folder, name))
        fake_cli.play("claude", first, again)
        killed, parts = _cut_after_the_run(sandbox, fake_cli)
        if killed:
            break
    else:
        pytest.fail("in 3 tries the driver never journaled the tool's result while the store was held, "
                    "or it dropped its journal at once")
    assert killed and parts[-1].finish_reason == "stop", parts[-1]
    assert any(isinstance(p, bc.StepReset) for p in parts), "the turn was not cut"
    calls = fake_cli.calls("claude")
    assert len(calls) == 2
    prompt = json.loads(calls[1]["stdin"])["message"]["content"]
    assert "toolu_1" in json.dumps([p.tool_call_id for p in parts if isinstance(p, bc.ToolResult)])
    assert "already ran" in prompt, f"the agent was asked again without being told the tool ran: {prompt!r}"

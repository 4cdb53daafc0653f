"""A command a driver runs for the agent runs at most once across bridge deaths (C24), on real
bridge processes SIGKILLed by pid: the ``openai`` driver against the scripted model server,
and the ``shell`` driver.

Each command notes its start in ``log.txt``, waits for a ``release`` file (bounded, at most
30 s), then appends one line to ``out.txt``. The bridge is SIGKILLed while the command waits
(or, for the "one step later" case, after the first command's ``tool-result`` part was
stored, while the step's second command waits); then ``release`` is made and the turn read on.
The command must have started once and appended once, and the turn finishes with that
command's result. The scripted model calls the commands whenever the conversation holds no
tool result yet, as a model asked again from before the tool call would.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from typing import Any, Callable, List

import pytest

import bridge_client as bc
from host_support import options, session_options, wait_until
from bridge_client.drivers.keeper import KeptCommand
from resilience_support import sigkill_bridge

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "agents"))
from model_server import Call, ModelServer, Reply, Text  # noqa: E402

pytestmark = pytest.mark.timeout(120)


def _slow(name: str) -> str:
    """A command that notes its start, waits for ``release`` (at most 30 s), appends a line."""
    return (
        f"echo {name} >> log.txt; i=0; "
        "while [ ! -e release ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; "
        f"echo {name} >> out.txt; echo ran-{name}"
    )


def _quick(name: str) -> str:
    return f"echo {name} >> log.txt; echo {name} >> out.txt; echo ran-{name}"


def _lines(workspace: str, name: str) -> List[str]:
    path = os.path.join(workspace, name)
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return f.read().split()


def _model(*commands: str) -> Reply:
    """Calls ``run_command`` for each of ``commands`` (one answer) while the conversation holds
    no tool result; once it does, answers with the tool outputs it got."""

    def build(request: Any) -> List[Any]:
        outputs = request.tool_outputs()
        if outputs:
            return [Text("Saw: " + " | ".join(outputs), 1)]
        return [Call("run_command", {"command": c}) for c in commands]

    return Reply(build)


def _read(
    turn: bc.Turn, at: Callable[[bc.Part], bool], kill: Callable[[], None], approve: bool = False
) -> List[bc.Part]:
    """Read ``turn`` to its end, approving each request when ``approve``, calling ``kill()``
    once after the first part ``at`` accepts."""
    parts: List[bc.Part] = []
    killed = False
    for part in turn:
        parts.append(part)
        if approve and isinstance(part, bc.ApprovalRequest):
            turn.approve(part)
        if not killed and at(part):
            kill()
            killed = True
    assert killed, f"the kill point was never reached: {[p.type for p in parts]}"
    return parts


def _kill_while_waiting(sandbox: Any, session: bc.Session, workspace: str, name: str) -> Callable[[], None]:
    """SIGKILL the bridge once the command ``name`` noted its start, then let it go on."""

    def kill() -> None:
        started = wait_until(lambda: name in _lines(workspace, "log.txt"), timeout=20)
        assert started, "the command did not start"
        sigkill_bridge(sandbox, session.bridge_id)
        open(os.path.join(workspace, "release"), "w").close()

    return kill


@pytest.fixture
def chat_model():
    with ModelServer() as server:
        yield server


def _openai(sandbox: Any, server: ModelServer, **kw: Any) -> bc.Session:
    agent = {"model": "test-model", "base_url": f"{server.url}/v1", "max_retries": 0}
    kw.setdefault("resend_window", 20.0)
    return bc.create_session(options("openai", agent_options=agent), session_options(sandbox, **kw))


def test_c24_openai_approved_command_killed_mid_run_runs_once_and_its_result_is_adopted(
    chat_model, sandbox, workspace
):
    chat_model.script(*[_model(_slow("a"))] * 3)
    with _openai(sandbox, chat_model, approvals=True) as session:
        turn = session.turn("Run the command")
        kill = _kill_while_waiting(sandbox, session, workspace, "a")
        parts = _read(turn, lambda p: isinstance(p, bc.ApprovalAnswer), kill, approve=True)
    assert parts[-1].type == "turn-finish" and parts[-1].finish_reason == "stop", parts[-1]
    assert _lines(workspace, "log.txt") == ["a"], "the command started again after the bridge died"
    assert _lines(workspace, "out.txt") == ["a"]
    assert len([p for p in parts if isinstance(p, bc.ApprovalRequest)]) == 1, "a second approval"
    assert any(isinstance(p, bc.StepReset) for p in parts), "the bridge was not restarted mid-step"
    results = [p for p in parts if isinstance(p, bc.ToolResult)]
    assert results[-1].output["exitCode"] == 0 and "ran-a" in results[-1].output["output"]
    assert "ran-a" in turn.text(), "the model got the command's result"
    # The cut step was not asked of the model again: the first answer, then the one after the result.
    assert len(chat_model.agent_requests()) == 2


def test_c24_openai_result_stored_before_the_step_ended_is_given_back_not_run_again(
    chat_model, sandbox, workspace
):
    # One answer, two commands: the bridge dies after the first one's tool-result part is
    # stored, while the second one runs (so the step cannot have ended).
    chat_model.script(*[_model(_quick("a"), _slow("b"))] * 3)
    with _openai(sandbox, chat_model) as session:
        turn = session.turn("Run the commands")
        kill = _kill_while_waiting(sandbox, session, workspace, "b")
        parts = _read(turn, lambda p: isinstance(p, bc.ToolResult), kill)
    assert parts[-1].type == "turn-finish" and parts[-1].finish_reason == "stop", parts[-1]
    assert sorted(_lines(workspace, "log.txt")) == ["a", "b"], "a command ran again"
    assert sorted(_lines(workspace, "out.txt")) == ["a", "b"]
    assert any(isinstance(p, bc.StepReset) for p in parts)
    final = turn.text()
    assert "ran-a" in final and "ran-b" in final, final
    assert len(chat_model.agent_requests()) == 2, "the model was asked again from before the tool calls"
    last = chat_model.agent_requests()[-1].body["messages"]
    assert [m["role"] for m in last[-3:]] == ["assistant", "tool", "tool"], json.dumps(last[-3:])


def test_c24_shell_command_killed_mid_run_runs_once_and_its_result_is_adopted(sandbox, workspace):
    with bc.create_session(options("shell"), session_options(sandbox, resend_window=20.0)) as session:
        turn = session.turn(_slow("a"))
        kill = _kill_while_waiting(sandbox, session, workspace, "a")
        parts = _read(turn, lambda p: isinstance(p, bc.ToolCall), kill)
    assert parts[-1].type == "turn-finish" and parts[-1].finish_reason == "stop", parts[-1]
    assert _lines(workspace, "log.txt") == ["a"], "the command started again after the bridge died"
    assert _lines(workspace, "out.txt") == ["a"]
    assert any(isinstance(p, bc.StepReset) for p in parts)
    results = [p for p in parts if isinstance(p, bc.ToolResult)]
    assert results[-1].output == {"exitCode": 0, "timedOut": False}
    assert turn.text().strip() == "ran-a", "the adopted command's output, once"


def test_c24_shell_command_whose_keeper_died_too_is_interrupted_not_run_again(sandbox, workspace):
    # The whole sandbox stopped: the bridge, the command and its keeper are SIGKILLed. The step
    # run again must say the command was interrupted, not run it a second time.
    with bc.create_session(options("shell"), session_options(sandbox, resend_window=20.0)) as session:
        turn = session.turn(_slow("a"))

        def kill() -> None:
            assert wait_until(lambda: "a" in _lines(workspace, "log.txt"), timeout=20)
            keepers = _keepers(workspace)
            assert keepers, "no keeper runs the command"
            sigkill_bridge(sandbox, session.bridge_id)
            for pid in keepers:
                os.kill(pid, 9)
            os.killpg(_command_group(workspace), 9)
            open(os.path.join(workspace, "release"), "w").close()

        parts = _read(turn, lambda p: isinstance(p, bc.ToolCall), kill)
    assert parts[-1].type == "turn-finish" and parts[-1].finish_reason == "error", parts[-1]
    assert _lines(workspace, "log.txt") == ["a"], "the command started again"
    assert _lines(workspace, "out.txt") == []
    results = [p for p in parts if isinstance(p, bc.ToolResult)]
    assert results[-1].is_error and results[-1].output["interrupted"] is True


def _keepers(workspace: str) -> List[int]:
    """The pids of the keepers whose command runs in ``workspace`` (from ``/proc``)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        if cwd == os.path.realpath(workspace) and any(b"keeper.json" in a for a in argv):
            found.append(int(entry))
    return found


def _command_group(workspace: str) -> int:
    """The process group of the shell that runs the command in ``workspace``."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        if cwd == os.path.realpath(workspace) and argv[:2] == [b"/bin/sh", b"-c"]:
            return os.getpgid(int(entry))
    raise AssertionError("the command's shell is not running")


_DIES_AFTER_START = """
import os, sys
from bridge_client.drivers.keeper import KeptCommand
KeptCommand.start(sys.argv[1], ["/bin/sh", "-c", sys.argv[2]], sys.argv[3], dict(os.environ), 30.0)
os.kill(os.getpid(), 9)  # a bridge SIGKILLed as soon as it started its keeper
"""

_DIES_BEFORE_START = """
import fcntl, os, sys
os.makedirs(sys.argv[1])
fd = os.open(os.path.join(sys.argv[1], "lock"), os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
os.kill(os.getpid(), 9)  # a bridge SIGKILLed after it took the record's lock, before its keeper
"""


def test_c24_a_bridge_killed_while_its_keeper_starts_leaves_the_command_to_run_once(tmp_path, workspace):
    # The keeper inherits the record's lock from the bridge: a bridge SIGKILLed before the
    # keeper is up still leaves a held lock, so the next bridge waits for the command's result
    # instead of taking it for one that never started.
    folder = str(tmp_path / "record")
    line = f"sleep 0.5; echo x >> {os.path.join(workspace, 'out.txt')}; echo done"
    bridge = subprocess.run([sys.executable, "-c", _DIES_AFTER_START, folder, line, workspace], timeout=30)
    assert bridge.returncode == -9
    kept = KeptCommand.adopt(folder)
    assert kept is not None, "the started command was taken for one that never ran"
    status = kept.wait(threading.Event())
    assert status == {"exitCode": 0, "timedOut": False, "cancelled": False}
    assert kept.output_text(100) == "done\n"
    assert _lines(workspace, "out.txt") == ["x"]
    # Killed before the keeper started: nothing ran, and the record says so (no output).
    other = str(tmp_path / "other")
    bridge = subprocess.run([sys.executable, "-c", _DIES_BEFORE_START, other], timeout=30)
    assert bridge.returncode == -9
    assert KeptCommand.adopt(other) is None and not os.path.exists(other)

"""C23 with the real CLI agents (Claude Code, Codex, Qwen Code, pi; offline against the
scripted model server): turn 1 in one sandbox, the sandbox lost (its bridge SIGKILLed, its
folder, its bridge's store and the CLI's transcript removed), the export restored into another
sandbox, turn 2: the model's request holds turn 1's prompt and answer, because the export
carried the CLI's transcript and the restore put it where the CLI looks from the new
workspace. (Gemini is not carried yet: its chats are kept by a project name it assigns.)"""

from __future__ import annotations

import glob
import os
import shutil

import pytest

import bridge_client as bc
from bridge_client.wire import portable
from host_support import kill_all_under, options, session_options
from model_server import text

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def other_workspace(tmp_path, home):
    folder = tmp_path / "other-workspace"
    folder.mkdir()
    yield str(folder)
    kill_all_under(str(folder))


# Where each CLI keeps its transcripts under the private HOME (removed with the sandbox).
TRANSCRIPTS = {
    "claude-code": (".claude", "projects"),
    "codex": (".codex", "sessions"),
    "qwen": (".qwen", "projects"),
    "pi": (".pi", "agent", "sessions"),
}


@pytest.mark.parametrize("driver", sorted(TRANSCRIPTS))
def test_c23_real_cli_restored_into_another_sandbox_remembers(
    driver, real_cli, model, sandbox, workspace, other_workspace, tmp_path
):
    cli = real_cli(driver)
    model.script(text("The answer is 42.", chunks=2), text("You asked about 42.", chunks=2))
    out = str(tmp_path / "chat.export")
    opts = options(cli.driver, agent_options=cli.agent_options)
    with bc.create_session(opts, session_options(sandbox, launch_timeout=60.0)) as session:
        first = session.turn("What is the answer to everything?")
        parts = list(first)
        assert parts[-1].finish_reason == "stop", parts[-1]
        session.export(out)
    body = portable.decode_export(open(out, "rb").read())
    (name,) = [f["name"] for f in body["files"]]
    assert name.startswith(driver), name
    # The sandbox is lost, and with it the CLI's transcript.
    kill_all_under(workspace, grace=0.0)
    shutil.rmtree(sandbox._state_root)
    for path in glob.glob(os.path.join(cli.home, *TRANSCRIPTS[driver], "*")):
        shutil.rmtree(path)
    other = bc.LocalSandbox(other_workspace)
    with bc.restore_session(out, session_options(other, launch_timeout=60.0), opts) as restored:
        second = restored.turn("What did I ask you?")
        parts = list(second)
        assert parts[-1].finish_reason == "stop", parts[-1]
        assert second.text() == "You asked about 42."
    requests = model.agent_requests()
    later = requests[-1].text()
    assert "What is the answer to everything?" in later and "The answer is 42." in later, later[:2000]
    assert "What did I ask you?" in later

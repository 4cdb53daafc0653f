"""A CLI agent whose program is missing gets it installed, for a LocalSandbox, into a private
prefix under the sandbox's state root (never the global npm prefix), says so in one line on
stderr, and the bridge's driver then runs that copy: proven with the real Codex CLI from npm
(the npm cache holds it after the agent_clis fixture), through a real bridge."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

import bridge_client as bc
from bridge_client.sandbox.npm import private_prefix
from host_support import options, session_options
from model_server import shell_call, text

pytestmark = pytest.mark.timeout(300)


def _global_root(npm: str) -> str:
    return subprocess.run([npm, "root", "-g"], capture_output=True, text=True, timeout=60).stdout.strip()


def test_missing_codex_is_installed_into_the_private_prefix_and_run(
    real_cli, model, sandbox, workspace, monkeypatch, capfd
):
    cli = real_cli("codex")
    del cli.agent_options["executable"]  # let the driver find (and the template install) it
    npm, node = shutil.which("npm"), shutil.which("node")
    assert npm and node
    path = os.pathsep.join(dict.fromkeys([os.path.dirname(npm), os.path.dirname(node), "/usr/bin", "/bin"]))
    if shutil.which("codex", path=path):
        pytest.skip(f"a codex is installed on {path}: the missing-CLI case cannot be had here")
    monkeypatch.setenv("PATH", path)
    global_codex = os.path.join(_global_root(npm), "@openai", "codex")
    had_global = os.path.exists(global_codex)
    prefix = private_prefix(sandbox.state_root, "@openai/codex", "0.171.0")
    model.script(shell_call("echo installed > g.txt"), text("done"))
    try:
        with bc.create_session(
            options("codex", agent_options=cli.agent_options),
            session_options(sandbox, launch_timeout=240.0, resend_window=30.0),
        ) as session:
            parts = list(session.turn("Write g.txt"))
        assert parts[-1].finish_reason == "stop", parts[-1]
        assert os.path.exists(os.path.join(workspace, "g.txt"))
        assert os.access(os.path.join(prefix, "node_modules", ".bin", "codex"), os.X_OK)
        err = capfd.readouterr().err
        lines = [line for line in err.splitlines() if "bridge-client: installing @openai/codex" in line]
        what = "@openai/codex@0.171.0 (npm, the Codex CLI (codex))"
        assert lines == [f"bridge-client: installing {what} into {prefix}"], err
        assert os.path.exists(global_codex) == had_global, "the global npm prefix is untouched"
    finally:
        shutil.rmtree(prefix, ignore_errors=True)  # 400 MB: not left in the temporary folder

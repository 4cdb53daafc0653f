"""The ``claude-code`` and ``codex`` templates install their CLI through npm only when the
sandbox lacks it (C01, C04): run against a real LocalSandbox with a fake ``npm`` on PATH that
records its calls and installs a stand-in program."""

from __future__ import annotations

import os
import sys

import pytest

import bridge_client as bc
from host_support import options


@pytest.fixture
def npm(tmp_path, monkeypatch):
    """A fake ``npm`` first on a PATH that has no claude or codex; returns its log path."""
    bin_dir = tmp_path / "npm-bin"
    bin_dir.mkdir()
    log = tmp_path / "npm.log"
    script = bin_dir / "npm"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> "{log}"\n'
        'case "$*" in\n'
        f'  *@anthropic-ai/claude-code*) printf "#!/bin/sh\\n" > "{bin_dir}/claude"; '
        f'chmod +x "{bin_dir}/claude";;\n'
        f'  *@openai/codex*) printf "#!/bin/sh\\n" > "{bin_dir}/codex"; chmod +x "{bin_dir}/codex";;\n'
        "esac\n"
    )
    script.chmod(0o755)
    monkeypatch.setenv(
        "PATH", f"{bin_dir}{os.pathsep}{os.path.dirname(sys.executable)}{os.pathsep}/usr/bin:/bin"
    )
    return log


@pytest.mark.parametrize(
    "agent, package", [("claude-code", "@anthropic-ai/claude-code"), ("codex", "@openai/codex")]
)
def test_c01_the_agent_cli_is_installed_through_npm_only_when_missing(sandbox, npm, agent, package):
    template = options(agent).template
    program = "claude" if agent == "claude-code" else "codex"
    assert template.steps[-1].check == ("/bin/sh", "-c", f"command -v {program}")
    template.run(sandbox)
    assert npm.read_text().split("\n")[:-1] == [f"install -g --no-fund --no-audit {package}"]
    template.run(sandbox)  # now present: nothing installed again
    assert len(npm.read_text().splitlines()) == 1


def test_other_agents_need_no_cli(sandbox, npm):
    for agent in ("echo", "shell", "openai"):
        agent_options = {"model": "m"} if agent == "openai" else None  # bridge_options checks them
        steps = options(agent, agent_options=agent_options).template.steps
        assert not any("CLI" in step.name for step in steps)
    assert bc.template.agent_cli_steps("my.module:make") == ()

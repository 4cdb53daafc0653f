"""The CLI agents' templates install their CLI through npm only when the sandbox lacks it
(C01, C04), and for a LocalSandbox only into a private prefix under its state root, never
with ``npm install -g``; never when ``executable`` is given; every install says on stderr what
and where. Run against a real LocalSandbox with a fake ``npm`` on PATH that records its calls
and installs a stand-in program where it is told to."""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading

import pytest

import bridge_client as bc
from bridge_client.sandbox.npm import AGENT_CLIS, IsolationStep, NpmCliStep, private_prefix
from host_support import options

PROGRAMS = {"claude-code": "claude", "codex": "codex", "gemini": "gemini", "qwen": "qwen", "pi": "pi",
            "opencode": "opencode", "copilot": "copilot", "codex-acp": "codex-acp", "cline": "cline"}


@pytest.fixture
def npm(tmp_path, monkeypatch):
    """A fake ``npm`` first on a PATH that has no agent CLI; returns its log path. With
    ``--prefix DIR`` it writes ``DIR/node_modules/.bin/PROGRAM``, with ``-g`` a program next to
    itself."""
    bin_dir = tmp_path / "npm-bin"
    bin_dir.mkdir()
    log = tmp_path / "npm.log"
    script = bin_dir / "npm"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> "{log}"\n'
        f'dest="{bin_dir}"\n'
        'if [ "$2" = "--prefix" ]; then dest="$3/node_modules/.bin"; mkdir -p "$dest"; fi\n'
        'case "$*" in\n'
        '  *@anthropic-ai/claude-code@*) p=claude;;\n'
        '  *@openai/codex@*) p=codex;;\n'
        '  *@google/gemini-cli@*) p=gemini;;\n'
        '  *@qwen-code/qwen-code@*) p=qwen;;\n'
        '  *@mariozechner/pi-coding-agent@*) p=pi;;\n'
        '  *\\ opencode-ai@*) p=opencode;;\n'
        '  *@github/copilot@*) p=copilot;;\n'
        '  *@zed-industries/codex-acp@*) p=codex-acp;;\n'
        '  *\\ cline@*) p=cline;;\n'
        "esac\n"
        'printf "#!/bin/sh\\n" > "$dest/$p"; chmod +x "$dest/$p"\n'
    )
    script.chmod(0o755)
    # Only the tools the steps use: /usr/bin may hold a CLI installed globally by someone else.
    tools = tmp_path / "tools"
    tools.mkdir()
    for tool in ("sh", "mkdir", "chmod", "printf", "test", "true"):
        os.symlink(shutil.which(tool), tools / tool)
    monkeypatch.setenv("PATH", os.pathsep.join([str(bin_dir), str(tools), os.path.dirname(sys.executable)]))
    return log


@pytest.mark.parametrize("agent", sorted(PROGRAMS))
def test_c01_the_agent_cli_is_installed_into_a_private_prefix_only_when_missing(sandbox, npm, agent, capfd):
    what, program, package, version = AGENT_CLIS[agent]
    template = options(agent).template
    step = template.steps[-1]
    assert isinstance(step, NpmCliStep) and step.check == ("/bin/sh", "-c", f"command -v {program}")
    template.run(sandbox)
    prefix = private_prefix(sandbox.state_root, package, version)
    assert npm.read_text().splitlines() == [
        f"install --prefix {prefix} --no-save --no-fund --no-audit {package}@{version}"
    ], "a LocalSandbox never gets npm install -g"
    assert os.access(os.path.join(prefix, "node_modules", ".bin", program), os.X_OK)
    err = capfd.readouterr().err
    assert err.count("bridge-client: installing") == 1
    assert f"installing {package}@{version} (npm, {what}) into {prefix}" in err
    template.run(sandbox)  # now present in the private prefix: nothing installed again
    assert len(npm.read_text().splitlines()) == 1
    assert "installing" not in capfd.readouterr().err


class Contained:
    """Any sandbox but a LocalSandbox counts as isolated: this one runs in a local folder."""

    def __init__(self, inner: bc.LocalSandbox) -> None:
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_c01_an_isolated_sandbox_installs_globally_inside_it(sandbox, npm):
    box = Contained(sandbox)
    step = NpmCliStep.for_cli(*AGENT_CLIS["codex"])
    expected = ("npm", "install", "-g", "--no-fund", "--no-audit", "@openai/codex@0.171.0")
    assert step.install_argv(box) == expected
    IsolationStep.make().run(box)
    with open(os.path.join(box.state_root, "agents", "sandbox.json")) as f:
        assert json.load(f) == {"isolated": True}


def test_no_install_when_executable_is_given(sandbox, npm):
    template = options("claude-code", agent_options={"executable": "/opt/claude/bin/claude"}).template
    assert not any(isinstance(step, NpmCliStep) for step in template.steps)
    template.run(sandbox)
    assert not npm.exists(), "npm never ran"
    with open(os.path.join(sandbox.state_root, "agents", "sandbox.json")) as f:
        assert json.load(f) == {"isolated": False}, "a LocalSandbox is recorded as not isolated"


def test_drivers_pin_the_versions_the_template_installs():
    from bridge_client.drivers import claude_code, codex, codex_acp, copilot, gemini, opencode, pi, qwen

    classes = {
        "claude-code": claude_code.ClaudeCodeDriver,
        "codex": codex.CodexDriver,
        "gemini": gemini.GeminiDriver,
        "qwen": qwen.QwenDriver,
        "pi": pi.PiDriver,
        "opencode": opencode.OpenCodeDriver,
        "copilot": copilot.CopilotDriver,
        "codex-acp": codex_acp.CodexAcpDriver,
    }
    for agent, cls in classes.items():
        _, program, package, version = AGENT_CLIS[agent]
        assert (cls.program, cls.package, cls.version) == (program, package, version)


def test_other_agents_need_no_cli(sandbox, npm):
    for agent in ("echo", "shell", "openai"):
        agent_options = {"model": "m"} if agent == "openai" else None  # bridge_options checks them
        steps = options(agent, agent_options=agent_options).template.steps
        assert not any("CLI" in step.name for step in steps)
    assert bc.template.agent_cli_steps("my.module:make") == ()


def test_c01_two_installers_at_once_run_npm_once(sandbox, npm, tmp_path):
    """Two hosts that find the CLI missing at the same moment: the second waits on the
    prefix's lock, sees the first one's install, and runs no npm of its own."""
    flock = shutil.which("flock", path=os.defpath + ":/usr/bin")
    if flock is None:
        pytest.skip("the flock program (util-linux) is not installed here")
    tools = tmp_path / "tools"
    for tool in (flock, shutil.which("sleep", path=os.defpath + ":/usr/bin")):
        os.symlink(tool, tools / os.path.basename(tool))
    script = npm.parent / "npm-bin" / "npm"
    # A slow install: long enough that both runs find the program missing before either ends.
    script.write_text(script.read_text().replace("#!/bin/sh\n", "#!/bin/sh\nsleep 0.5\n", 1))
    step = NpmCliStep.for_cli(*AGENT_CLIS["pi"])
    errors = []

    def install():
        try:
            step.run(sandbox)
        except Exception as exc:  # pragma: no cover - shown by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=install) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    assert len(npm.read_text().splitlines()) == 1, "npm ran once; the second installer waited"
    assert os.access(step.private_program(sandbox), os.X_OK)


def test_c01_a_sandbox_without_npm_says_so(sandbox, npm):
    os.unlink(npm.parent / "npm-bin" / "npm")
    step = NpmCliStep.for_cli(*AGENT_CLIS["pi"])
    with pytest.raises(bc.TemplateError, match="cannot run npm: not found"):
        step.run(sandbox)

"""The PyPI agents' templates (aider, vibe) install their CLI only when the sandbox lacks it
(C01), into a venv of its own under the sandbox's state root, made with a Python recent
enough for the CLI (Mistral Vibe needs 3.12 or later), never into a system Python; never when
``executable`` is given; a sandbox without such a Python gets a TemplateError that says so;
the drivers find the program in that venv. Run against a real LocalSandbox with fake
``python3.N`` programs on PATH that record their calls and make a stand-in venv."""

from __future__ import annotations

import os
import shutil
import sys

import pytest

import bridge_client as bc
from bridge_client.sandbox.npm import private_prefix
from bridge_client.sandbox.pip_cli import PY_AGENT_CLIS, PipCliStep
from host_support import options

FAKE_PYTHON = """#!/bin/sh
echo "$0 $*" >> "{log}"
if [ "$1" = "-c" ]; then exit 0; fi
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then
  mkdir -p "$3/bin"
  printf '#!/bin/sh\\necho "$0 $*" >> "{log}"\\nd=$(dirname "$0")\\n'\\
'printf "#!/bin/sh\\\\n" > "$d/{program}"; chmod +x "$d/{program}"\\n' > "$3/bin/python"
  chmod +x "$3/bin/python"
fi
"""


@pytest.fixture
def pythons(tmp_path, monkeypatch):
    """``pythons(program, *minors)``: fake ``python3.N`` for each minor first on a PATH with
    no agent CLI and no other Python; returns the log path."""

    def make(program, *minors):
        bin_dir = tmp_path / "py-bin"
        bin_dir.mkdir(exist_ok=True)
        log = tmp_path / "python.log"
        for minor in minors:
            script = bin_dir / f"python3.{minor}"
            script.write_text(FAKE_PYTHON.format(log=log, program=program))
            script.chmod(0o755)
        tools = tmp_path / "tools"
        tools.mkdir(exist_ok=True)
        for tool in ("sh", "mkdir", "chmod", "printf", "test", "true", "rm", "dirname"):
            if not (tools / tool).exists():
                os.symlink(shutil.which(tool), tools / tool)
        monkeypatch.setenv("PATH", os.pathsep.join([str(bin_dir), str(tools)]))
        return log

    return make


@pytest.mark.parametrize("agent", sorted(PY_AGENT_CLIS))
def test_c01_a_pypi_agent_cli_is_installed_into_its_own_venv_only_when_missing(
    sandbox, pythons, agent, capfd
):
    what, program, package, version, oldest = PY_AGENT_CLIS[agent]
    log = pythons(program, 11, 12, 13)
    step = options(agent).template.steps[-1]
    assert isinstance(step, PipCliStep)
    step.run(sandbox)
    venv = private_prefix(sandbox.state_root, package, version)
    calls = log.read_text().splitlines()
    made = [c for c in calls if " -m venv " in c]
    assert len(made) == 1 and made[0].split()[0].endswith("python3.13") and made[0].endswith(venv), calls
    assert calls[-1] == f"{venv}/bin/python -m pip install --quiet {package}=={version}", calls
    assert os.access(os.path.join(venv, "bin", program), os.X_OK)
    err = capfd.readouterr().err
    assert f"installing {package}=={version} (PyPI, {what}) into {venv}" in err
    step.run(sandbox)  # present now: nothing installed again
    assert log.read_text().splitlines() == calls
    assert "installing" not in capfd.readouterr().err


def test_c01_vibe_without_python_3_12_is_a_template_error_naming_it(sandbox, pythons):
    pythons("vibe-acp", 10, 11)  # and no python3 at all on this PATH
    step = options("vibe").template.steps[-1]
    with pytest.raises(bc.TemplateError, match=r"no Python 3\.12 or later"):
        step.run(sandbox)


def test_no_pypi_install_when_executable_is_given():
    for agent in PY_AGENT_CLIS:
        steps = options(agent, agent_options={"executable": "/opt/x/bin/x"}).template.steps
        assert not any(isinstance(s, PipCliStep) for s in steps)


def test_pypi_drivers_pin_the_versions_the_template_installs_and_find_their_venv(tmp_path, monkeypatch):
    from bridge_client import drivers
    from bridge_client.drivers import aider, vibe
    from bridge_client.drivers.cli_install import find_cli

    for agent, cls in {"aider": aider.AiderDriver, "vibe": vibe.VibeDriver}.items():
        _, program, package, version, _ = PY_AGENT_CLIS[agent]
        assert (cls.program, cls.package, cls.version) == (program, package, version)
        root = tmp_path / "root"
        venv_bin = os.path.join(private_prefix(str(root), package, version), "bin")
        os.makedirs(venv_bin)
        with open(os.path.join(venv_bin, program), "w") as f:
            f.write("#!/bin/sh\n")
        os.chmod(os.path.join(venv_bin, program), 0o755)
        monkeypatch.setattr(drivers, "STATE_DIR", str(root / "bridges" / "b1"))
        monkeypatch.setenv("PATH", os.path.dirname(sys.executable))
        assert find_cli(program, package, version, None) == os.path.join(venv_bin, program)
        shutil.rmtree(root)


def test_cline_driver_pins_the_version_the_template_installs():
    from bridge_client.drivers import cline
    from bridge_client.sandbox.npm import AGENT_CLIS

    _, program, package, version = AGENT_CLIS["cline"]
    assert (cline.ClineDriver.program, cline.ClineDriver.package, cline.ClineDriver.version) == (
        program, package, version)

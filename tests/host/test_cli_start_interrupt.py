"""Ctrl-C in the first moments of ``bridge-client run`` (issue 27, item 9): while the command
loads the package's modules, a Ctrl-C ends it with one line, ``bridge-client: interrupted``,
and exit status 130, never a KeyboardInterrupt traceback from inside an import.

Deterministic: a ``sitecustomize`` only these tests put on ``PYTHONPATH`` installs an import
hook that stops at one named module (a slow import's stand-in) and says so in a file; the test
sends one real SIGINT to the real process then. Each hook waits at most 30 s, so a process
that was not interrupted ends by itself."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.timeout(120)

SITECUSTOMIZE = '''
import os, sys, time

class _Stall:
    """Stops at the import of $STALL_MODULE: writes $STALL_READY, then waits (at most 30 s)."""

    def find_spec(self, name, path=None, target=None):
        if name == os.environ.get("STALL_MODULE") and not getattr(self, "done", False):
            self.done = True
            with open(os.environ["STALL_READY"], "w") as f:
                f.write(name)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                time.sleep(0.02)
        return None

sys.meta_path.insert(0, _Stall())
'''

CONSOLE_SCRIPT = os.path.join(os.path.dirname(sys.executable), "bridge-client")


def _interrupted_at(module, command, tmp_path, workspace):
    hook = tmp_path / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    ready = tmp_path / f"ready-{module}"
    env = dict(os.environ, STALL_MODULE=module, STALL_READY=str(ready))
    env["PYTHONPATH"] = os.pathsep.join([str(hook), *filter(None, [os.environ.get("PYTHONPATH")])])
    proc = subprocess.Popen(
        [*command, "run", "echo never", "--sandbox", workspace],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ready.exists(), f"the import of {module} was not reached: {proc.communicate()}"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=40)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, out.decode(), err.decode()


@pytest.mark.parametrize(
    "module",
    [
        "bridge_client.errors",  # the package's own first imports, before the command's module
        "bridge_client.wire.parts",
        "bridge_client.cli.run",  # the command's modules
        "bridge_client.agent",  # the host side, loaded as the run starts
    ],
)
@pytest.mark.parametrize("how", ["console script", "python -m bridge_client"])
def test_ctrl_c_while_the_command_loads_says_interrupted_and_exits_130(module, how, tmp_path, workspace):
    if how == "console script":
        if not os.path.exists(CONSOLE_SCRIPT):
            pytest.skip("no bridge-client console script next to this Python")
        command = [CONSOLE_SCRIPT]
    else:
        command = [sys.executable, "-m", "bridge_client"]
    status, out, err = _interrupted_at(module, command, tmp_path, workspace)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err == "bridge-client: interrupted\n", err
    assert status == 130
    assert out == ""


def test_importing_the_package_in_a_program_keeps_its_ctrl_c(tmp_path):
    # A program that imports bridge_client keeps Python's own Ctrl-C (KeyboardInterrupt).
    code = (
        "import signal, bridge_client\n"
        "assert signal.getsignal(signal.SIGINT) is signal.default_int_handler\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr

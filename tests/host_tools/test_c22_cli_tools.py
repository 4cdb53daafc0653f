"""``bridge-client run --tool MODULE:FUNCTION``: a real CLI process runs the function, once,
in its own process, and prints the call as a tool line; bad tools are one-line usage errors."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(90)

HERE = os.path.dirname(os.path.abspath(__file__))


def _cli(workspace, model, *extra, env=None):
    mock = json.dumps({"scenario": "host-lookup", "log": model.log})
    return subprocess.run(
        [sys.executable, "-m", "bridge_client.cli", "run", "look alpha up", "--sandbox", workspace,
         "--agent", "host_tools_mock:make_driver", "--option", "model=gpt-test", "--option", f"mock={mock}",
         *extra],
        capture_output=True, text=True, timeout=80, env={**os.environ, **(env or {})}, cwd=HERE,
    )


def test_c22_cli_run_tool_runs_the_function_in_the_cli_process(workspace, model, tmp_path):
    calls = str(tmp_path / "calls")
    done = _cli(workspace, model, "--tool", "cli_tools:lookup", env={"CLI_TOOLS_LOG": calls})
    assert done.returncode == 0, done.stderr
    assert '[lookup] {"key": "alpha"}' in done.stdout
    assert '[lookup ok] {"key": "alpha", "value": 1}' in done.stdout
    assert done.stdout.rstrip().splitlines()[-1] == "[finished] stop"
    with open(calls) as f:
        (line,) = f.read().splitlines()
    assert line.startswith("alpha ")
    (message,) = [m for m in model.requests()[1]["body"]["messages"] if m["role"] == "tool"]
    assert json.loads(message["content"]) == {"key": "alpha", "value": 1}


@pytest.mark.parametrize(
    "spec, words",
    [
        ("cli_tools", "give MODULE:FUNCTION"),
        ("no_such_module_xyz:f", "cannot import no_such_module_xyz"),
        ("cli_tools:nothing", "has no function nothing"),
        ("cli_tools:untyped", "has no type hint"),
    ],
)
def test_cli_run_tool_refuses_bad_tools_in_one_line(workspace, model, spec, words):
    done = _cli(workspace, model, "--tool", spec)
    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("bridge-client: error: --tool") and words in line, line

"""The example of docs/host-tools.md runs as written, in a fresh folder, with one change: the
``openai`` agent's endpoint is the scripted model (tests/host_tools/host_tools_mock.py), given
as bridge options in place of the name ``"openai"``."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(90)

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "docs")


def test_c22_the_host_tools_guide_runs_as_written(workspace, model):
    with open(os.path.join(DOCS, "host-tools.md"), encoding="utf-8") as f:
        (code,) = re.findall(r"```python\n(.*?)```", f.read(), re.S)[:1]
    call = 'bc.create_session("openai", "./repo", tools=[lookup_order])'
    assert call in code
    mock = {"scenario": "doc-order", "log": model.log}
    prelude = (
        "import bridge_client as _bc\n"
        "OPTIONS = _bc.bridge_options('host_tools_mock:make_driver', agent_id='openai', "
        f"agent_options={{'model': 'gpt-test', 'mock': {mock!r}}})\n"
    )
    script = os.path.join(workspace, "snippet.py")
    with open(script, "w", encoding="utf-8") as f:
        f.write(prelude + code.replace(call, call.replace('"openai"', "OPTIONS")))
    os.mkdir(os.path.join(workspace, "repo"))
    done = subprocess.run([sys.executable, script], cwd=workspace, capture_output=True, text=True, timeout=80)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "the agent calls lookup_order {'order_id': 'A-1001'}",
        "it got {'id': 'A-1001', 'status': 'shipped'}",
        "Yes, A-1001 has shipped.",
    ]
    (message,) = [m for m in model.requests()[1]["body"]["messages"] if m["role"] == "tool"]
    assert json.loads(message["content"]) == {"id": "A-1001", "status": "shipped"}

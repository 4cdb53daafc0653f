"""Fixtures of the host tool tests: the scripted ``openai`` model (``host_tools_mock``) in
real bridge processes, and its request log."""
from __future__ import annotations

import json
import os
import sys
from typing import Iterator

import pytest

from host_support import options

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


@pytest.fixture
def model(tmp_path, monkeypatch):
    """``model(scenario, **options)`` -> bridge options; ``model.requests()`` the model's log."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([HERE, REPO, os.environ.get("PYTHONPATH", "")]))
    log = str(tmp_path / "requests.jsonl")

    def make(scenario, **kw):
        agent_options = {
            "model": "gpt-test",
            "backoff_initial": 0.01,
            "backoff_max": 0.05,
            "mock": {"scenario": scenario, "log": log},
        }
        agent_options.update(kw)
        return options("host_tools_mock:make_driver", agent_id="openai", agent_options=agent_options)

    def requests():
        if not os.path.exists(log):
            return []
        with open(log) as f:
            return [json.loads(line) for line in f]

    make.requests = requests
    make.log = log
    return make


sys.path.insert(0, os.path.join(os.path.dirname(HERE), "resilience"))
from resilience_proxy import ProxySandbox  # noqa: E402


@pytest.fixture
def proxied(sandbox) -> Iterator[ProxySandbox]:
    """The workspace's sandbox behind a TCP proxy per exposed port; proxies closed afterwards."""
    wrapped = ProxySandbox(sandbox)
    yield wrapped
    wrapped.close()

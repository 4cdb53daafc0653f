"""Fixtures for the resilience suite (issue 3): a private home, a workspace whose processes
are killed by pid afterwards, a plain sandbox, and a sandbox behind a commandable TCP proxy.

The host-side helpers (``host_support``) are shared with tests/host."""
from __future__ import annotations

import os
import sys
from typing import Iterator

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "host"))

import bridge_client as bc  # noqa: E402
from host_support import SECRET, kill_all_under  # noqa: E402
from resilience_proxy import ProxySandbox  # noqa: E402


@pytest.fixture
def home(tmp_path, monkeypatch) -> Iterator[str]:
    """A private BRIDGE_CLIENT_HOME and a fixed shared secret."""
    folder = tmp_path / "home"
    folder.mkdir()
    monkeypatch.setenv("BRIDGE_CLIENT_HOME", str(folder))
    monkeypatch.setenv("BRIDGE_CLIENT_SECRET", SECRET)
    yield str(folder)


@pytest.fixture
def workspace(tmp_path, home) -> Iterator[str]:
    """An empty workspace folder; every process still working in it is killed afterwards."""
    folder = tmp_path / "workspace"
    folder.mkdir()
    yield str(folder)
    os.makedirs(str(folder), exist_ok=True)
    kill_all_under(str(folder))


@pytest.fixture
def sandbox(workspace) -> bc.LocalSandbox:
    return bc.LocalSandbox(workspace)


@pytest.fixture
def proxied(sandbox) -> Iterator[ProxySandbox]:
    """The workspace's sandbox behind a TCP proxy per exposed port; proxies closed afterwards."""
    wrapped = ProxySandbox(sandbox)
    yield wrapped
    wrapped.close()

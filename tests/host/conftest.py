"""Fixtures for host-side tests: a private home, a workspace, and cleanup of every bridge
process the test started (found by pid through /proc, never by name)."""
from __future__ import annotations

from typing import Iterator

import pytest

import bridge_client as bc
from host_support import SECRET, kill_all_under


@pytest.fixture
def home(tmp_path, monkeypatch) -> Iterator[str]:
    """A private BRIDGE_CLIENT_HOME and a fixed shared secret; kills leftover bridges."""
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
    kill_all_under(str(folder))


@pytest.fixture
def sandbox(workspace) -> bc.LocalSandbox:
    return bc.LocalSandbox(workspace)



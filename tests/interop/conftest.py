"""Fixtures for the interop tests: a private home and workspace (as in tests/host), and real
bridge processes of this package (as in tests/bridge), all stopped by pid."""

from __future__ import annotations

import os
import sys
from typing import Iterator, List

import pytest

_TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _folder in ("host", "bridge"):
    _path = os.path.join(_TESTS, _folder)
    if _path not in sys.path:
        sys.path.insert(0, _path)

import bridge_client as bc  # noqa: E402
from bridge_harness import BridgeProcess, prepare_state  # noqa: E402
from host_support import SECRET, kill_all_under  # noqa: E402
from interop_support import node  # noqa: E402


@pytest.fixture(autouse=True)
def _node_and_packages() -> None:
    """Skip at once when node is absent; fail at once when the pinned packages are missing."""
    node()


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
    """An empty workspace; every process still working in it is killed afterwards (by pid)."""
    folder = tmp_path / "workspace"
    folder.mkdir()
    yield str(folder)
    kill_all_under(str(folder))


@pytest.fixture
def sandbox(workspace) -> bc.LocalSandbox:
    return bc.LocalSandbox(workspace)


@pytest.fixture
def py_bridge(tmp_path) -> Iterator[BridgeProcess]:
    """One running bridge of this package (echo driver: 3 steps, 10 ms before each part),
    stopped by pid afterwards."""
    made: List[BridgeProcess] = []
    state = str(tmp_path / "state")
    prepare_state(state, options={"steps": 3, "delay": 0.01})
    bridge = BridgeProcess(state, str(tmp_path / "bridge-workspace"))
    made.append(bridge)
    try:
        yield bridge.start()
    finally:
        for b in made:
            b.stop()

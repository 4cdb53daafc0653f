"""Fixtures for the protocol tests: real bridge processes (tests/bridge's harness) and a
private home and workspace (as tests/host), all stopped by pid."""

from __future__ import annotations

import os
import sys
import uuid
from typing import Any, Callable, Iterator, List

import pytest

_TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _folder in ("host", "bridge"):
    _path = os.path.join(_TESTS, _folder)
    if _path not in sys.path:
        sys.path.insert(0, _path)

import bridge_client as bc  # noqa: E402
from bridge_harness import BridgeProcess, prepare_state  # noqa: E402
from host_support import SECRET, kill_all_under  # noqa: E402


@pytest.fixture
def make_bridge(tmp_path) -> Iterator[Callable[..., BridgeProcess]]:
    """``make(options=None, driver="echo", **launch)``: a running bridge of this package in a
    fresh state directory; every one made is stopped by pid at teardown."""
    made: List[BridgeProcess] = []

    def make(options: Any = None, driver: str = "echo", **launch: Any) -> BridgeProcess:
        state = str(tmp_path / f"state-{len(made)}")
        prepare_state(state, agent_id=driver, options=options, **launch)
        bridge = BridgeProcess(state, str(tmp_path / f"workspace-{len(made)}"), driver)
        made.append(bridge)
        return bridge.start()

    yield make
    for bridge in made:
        bridge.stop()


@pytest.fixture
def sid() -> str:
    return f"s-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def home(tmp_path, monkeypatch) -> Iterator[str]:
    folder = tmp_path / "home"
    folder.mkdir()
    monkeypatch.setenv("BRIDGE_CLIENT_HOME", str(folder))
    monkeypatch.setenv("BRIDGE_CLIENT_SECRET", SECRET)
    yield str(folder)


@pytest.fixture
def workspace(tmp_path, home) -> Iterator[str]:
    folder = tmp_path / "workspace"
    folder.mkdir()
    yield str(folder)
    kill_all_under(str(folder))


@pytest.fixture
def sandbox(workspace) -> bc.LocalSandbox:
    return bc.LocalSandbox(workspace)

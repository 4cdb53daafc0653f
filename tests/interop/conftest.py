"""Fixtures for the interop tests: a private home and workspace (as in tests/host), and real
bridge processes of this package (as in tests/bridge), all stopped by pid."""

from __future__ import annotations

from typing import Iterator, List

import pytest


from bridge_harness import BridgeProcess, prepare_state  # noqa: E402
from interop_support import node  # noqa: E402
from prerequisites import interop_node_modules  # noqa: E402


@pytest.fixture(scope="session")
def _interop_packages() -> str:
    """The npm packages the lock file pins, installed once into the cache (``npm ci``) and
    linked as tests/interop/node_modules; skips, saying why, without node or npm."""
    import shutil

    if shutil.which("node") is None:
        pytest.skip("node is not installed: the Effect interop tests need Node.js >= 20")
    return interop_node_modules(pytest.skip)


@pytest.fixture(autouse=True)
def _node_and_packages(_interop_packages) -> None:
    """Skip at once when node is absent; fail at once when the pinned packages are missing."""
    node()


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

"""Fixtures for the bridge's tests: real bridge processes, stopped by pid in teardown."""
from __future__ import annotations

import os
import uuid
from typing import Any, Callable, Iterator, List

import pytest

from bridge_harness import BridgeProcess, prepare_state


@pytest.fixture
def make_bridge(tmp_path) -> Iterator[Callable[..., BridgeProcess]]:
    """Return ``make(driver="echo", options=None, idle_timeout=30, agent_id=None, start=True,
    state=None, args=())``: prepares a state directory (launch.json, token) and starts a bridge
    in a workspace folder, with ``args`` as more command-line arguments. Every bridge made is
    stopped by pid at teardown."""
    made: List[BridgeProcess] = []

    def make(
        driver: str = "echo",
        options: Any = None,
        idle_timeout: float = 30.0,
        agent_id: Any = None,
        start: bool = True,
        state: Any = None,
        args: Any = (),
        **launch: Any,
    ) -> BridgeProcess:
        state = state or str(tmp_path / f"state-{len(made)}")
        if agent_id is None:
            agent_id = driver if driver in ("echo", "shell") else "echo"
        if not os.path.exists(os.path.join(state, "launch.json")):
            prepare_state(state, agent_id=agent_id, options=options, idle_timeout=idle_timeout, **launch)
        bridge = BridgeProcess(state, str(tmp_path / "workspace"), driver, args=args)
        made.append(bridge)
        return bridge.start() if start else bridge.spawn()

    yield make
    for bridge in made:
        bridge.stop()


@pytest.fixture
def sid() -> str:
    """A fresh session id."""
    return f"s-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def tid() -> str:
    """A fresh turn id."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
def shared_echo(tmp_path_factory) -> Iterator[BridgeProcess]:
    """One echo bridge (2 steps, 3 chunks per step) shared by a module's tests; each test uses
    its own session and turn ids."""
    root = tmp_path_factory.mktemp("shared")
    state = str(root / "state")
    prepare_state(state, agent_id="echo", options={"steps": 2, "chunks": 3})
    bridge = BridgeProcess(state, str(root / "workspace"), "echo").start()
    yield bridge
    bridge.stop()


@pytest.fixture
def long_turn(tmp_path: Any) -> Iterator[Any]:
    """A finished echo turn of more than one Chunk of parts, in a TurnManager on a real store
    (no bridge process): for tests of one ReadStream's sends."""
    from bridge_client.bridge.store import Store
    from bridge_client.bridge.turns import MAX_CHUNK_VALUES, TurnManager
    from bridge_client.drivers import echo

    store = Store(str(tmp_path / "bridge.sqlite3"))
    parts = 2 * MAX_CHUNK_VALUES
    manager = TurnManager(store, echo.EchoDriver(chunks=parts), agent_id="echo", bridge_id="b" * 16)
    manager.open_session("s", None)
    try:
        manager.start_turn("s", "t", "x" * parts)
        turn = manager.find_turn("s", "t")
        turn.wait_for_parts(10**9, lambda: False)  # complete
        yield turn
    finally:
        manager.close()
        store.close()

"""Fixtures every test folder shares: a private home, a workspace whose processes are killed
by pid afterwards (through /proc, never by name), a sandbox on it, and real bridge processes
of this package. Folders override what they need (tests/bridge's ``make_bridge`` takes the
driver first; tests/remote's ``home`` also clears the proxy variables).

Prerequisites beyond Python (a Docker engine, npm packages) are set up by session fixtures
through tests/prerequisites.py, or the tests that need them skip and say what is missing.

The shared helpers live in tests/host (``host_support``) and tests/bridge (``bridge_harness``);
both folders are put on the import path here, once, for every test module."""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from typing import Any, Callable, Iterator, List

import pytest

_TESTS = os.path.dirname(os.path.abspath(__file__))
for _folder in ("", "host", "bridge"):  # "": tests/ itself, also under --import-mode=importlib
    _path = os.path.normpath(os.path.join(_TESTS, _folder))
    if _path not in sys.path:
        sys.path.insert(0, _path)

import bridge_client as bc  # noqa: E402
from bridge_harness import BridgeProcess, prepare_state  # noqa: E402
from host_support import SECRET, kill_all_under  # noqa: E402
from prerequisites import DockerEngine  # noqa: E402


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", "quick: the quick subset for contributors (see tests/conftest.py)")
    # No test writes into the user's own home: a test that forgets the ``home`` fixture still
    # gets a private BRIDGE_CLIENT_HOME for the run (the fixture gives each test its own).
    os.environ["BRIDGE_CLIENT_HOME"] = tempfile.mkdtemp(prefix="bridge-client-tests-home-")


# Under pytest-xdist (the test command runs the suite on one worker per core, ``--dist
# loadgroup``), tests that share a machine-wide thing run on one worker: the Docker engine
# (one a run starts is its own dockerd, socket and pid file) and the test sshd (its login user,
# made with useradd, which locks /etc/passwd). Grouped by the fixture they use, so a new test
# is grouped without a mark of its own.
_GROUPS = {"docker_engine": "docker", "sshd": "ssh"}


# The quick subset (``pytest -m quick``): the test modules of tests/ itself (the wire, the
# identity and the state directory's files, exports, docs, the package's structure, a local
# sandbox), for a contributor's loop between edits; the folders below it, which run real
# bridges, agent CLIs, containers and SSH hosts, and the benchmarks' smoke test and the
# installed-wheel test are left to the full suite. Marked by place, so a new test needs no mark.
_NOT_QUICK_FILES = frozenset({"test_benchmarks_smoke.py", "test_installed.py", "test_docker_files_upload.py"})


def _quick(path: str) -> bool:
    return os.path.dirname(os.path.abspath(path)) == _TESTS and os.path.basename(path) not in _NOT_QUICK_FILES


@pytest.hookimpl(tryfirst=True)  # before xdist reads the marks
def pytest_collection_modifyitems(config: Any, items: List[Any]) -> None:
    for item in items:
        if _quick(str(item.fspath)):
            item.add_marker(pytest.mark.quick)
        names = getattr(item, "fixturenames", ())
        for fixture, group in _GROUPS.items():
            if fixture in names:
                item.add_marker(pytest.mark.xdist_group(group))
                break


def pytest_unconfigure(config: Any) -> None:
    folder = os.environ.get("BRIDGE_CLIENT_HOME", "")
    if os.path.basename(folder).startswith("bridge-client-tests-home-"):
        shutil.rmtree(folder, ignore_errors=True)


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
    kill_all_under(str(folder))


@pytest.fixture
def sandbox(workspace) -> bc.LocalSandbox:
    """A LocalSandbox on the workspace."""
    return bc.LocalSandbox(workspace)


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
    """A fresh session id."""
    return f"s-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[DockerEngine]:
    """The Docker engine for the whole run: one that answers is used and left running; else
    docker.io is installed (root, apt) and a dockerd started, stopped by its pid at the end.
    Tests that need it skip with the reason when there is none."""
    engine = DockerEngine().start()
    try:
        yield engine
    finally:
        engine.stop()

"""Fixtures of the portable-session tests: a second sandbox (another folder) whose processes
are killed by pid afterwards, like the workspace's."""
from __future__ import annotations

from typing import Iterator

import pytest

import bridge_client as bc
from host_support import kill_all_under


@pytest.fixture
def other_workspace(tmp_path, home) -> Iterator[str]:
    """A second empty workspace folder (another sandbox); its processes are killed afterwards."""
    folder = tmp_path / "other-workspace"
    folder.mkdir()
    yield str(folder)
    kill_all_under(str(folder))


@pytest.fixture
def other_sandbox(other_workspace) -> bc.LocalSandbox:
    """A LocalSandbox on the second workspace."""
    return bc.LocalSandbox(other_workspace)

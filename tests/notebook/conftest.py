"""Fixtures for the notebook test: a private home and workspace, and cleanup of every
process left working in the workspace (the kernel and the bridges, by pid through /proc)."""
from __future__ import annotations

import os
import sys
from typing import Iterator

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "host"))

from host_support import SECRET, kill_all_under  # noqa: E402


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

"""Fixtures for remote endpoints: a test CA (trustme), a private home and workspace, and
cleanup of the bridges a test started (by pid, through /proc)."""
from __future__ import annotations

import os
import sys
from typing import Iterator

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "host"))

from host_support import SECRET, kill_all_under  # noqa: E402

trustme = pytest.importorskip("trustme")


@pytest.fixture
def home(tmp_path, monkeypatch) -> Iterator[str]:
    folder = tmp_path / "home"
    folder.mkdir()
    monkeypatch.setenv("BRIDGE_CLIENT_HOME", str(folder))
    monkeypatch.setenv("BRIDGE_CLIENT_SECRET", SECRET)
    for name in ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
                 "all_proxy", "ALL_PROXY", "WEBSOCKET_CLIENT_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    yield str(folder)


@pytest.fixture
def workspace(tmp_path, home) -> Iterator[str]:
    folder = tmp_path / "workspace"
    folder.mkdir()
    yield str(folder)
    kill_all_under(str(folder))


@pytest.fixture(scope="session")
def ca():
    """A test certificate authority (trustme)."""
    return trustme.CA()


@pytest.fixture
def ca_file(ca, tmp_path) -> str:
    path = str(tmp_path / "test-ca.pem")
    ca.cert_pem.write_to_path(path)
    return path

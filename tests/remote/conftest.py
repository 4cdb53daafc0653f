"""Fixtures for remote endpoints: a test CA (trustme), a private home and workspace, and
cleanup of the bridges a test started (by pid, through /proc)."""
from __future__ import annotations

from typing import Iterator

import pytest


trustme = pytest.importorskip("trustme")


@pytest.fixture
def home(home, monkeypatch) -> Iterator[str]:
    """tests/conftest.py's private home, with no proxy or CA variables from the caller."""
    for name in ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
                 "all_proxy", "ALL_PROXY", "WEBSOCKET_CLIENT_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    yield home


@pytest.fixture(scope="session")
def ca():
    """A test certificate authority (trustme)."""
    return trustme.CA()


@pytest.fixture
def ca_file(ca, tmp_path) -> str:
    path = str(tmp_path / "test-ca.pem")
    ca.cert_pem.write_to_path(path)
    return path

"""Fixtures for the interactive-turns suite (C18): the shared private home, workspace and
sandbox (tests/conftest.py), and a sandbox behind a commandable TCP proxy (tests/resilience)."""
from __future__ import annotations

import os
import sys
from typing import Iterator

import pytest

_RESILIENCE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "resilience")
if _RESILIENCE not in sys.path:
    sys.path.insert(0, _RESILIENCE)

from resilience_proxy import ProxySandbox  # noqa: E402


@pytest.fixture
def proxied(sandbox) -> Iterator[ProxySandbox]:
    """The workspace's sandbox behind a TCP proxy per exposed port; proxies closed afterwards."""
    wrapped = ProxySandbox(sandbox)
    yield wrapped
    wrapped.close()

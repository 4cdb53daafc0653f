"""Fixtures for the resilience suite (issue 3): a private home, a workspace whose processes
are killed by pid afterwards, a plain sandbox, and a sandbox behind a commandable TCP proxy.

The host-side helpers (``host_support``) are shared with tests/host."""
from __future__ import annotations

from typing import Iterator

import pytest


from resilience_proxy import ProxySandbox  # noqa: E402


@pytest.fixture
def proxied(sandbox) -> Iterator[ProxySandbox]:
    """The workspace's sandbox behind a TCP proxy per exposed port; proxies closed afterwards."""
    wrapped = ProxySandbox(sandbox)
    yield wrapped
    wrapped.close()

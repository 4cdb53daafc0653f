"""Fixtures of the ACP driver's tests: our own ACP agent (acp_agent.py) as the driver's
command, with its session store in the test's folder. The shared fixtures (home, workspace,
sandbox) come from the root conftest; tests/env's helpers are put on the import path."""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
for _folder in (_HERE, os.path.join(os.path.dirname(_HERE), "env")):
    if _folder not in sys.path:
        sys.path.insert(0, _folder)

AGENT = os.path.join(_HERE, "acp_agent.py")


@pytest.fixture
def acp_options(tmp_path) -> Callable[..., Any]:
    """``make(*flags, **agent_options)``: bridge options of the ``acp`` driver running our
    agent with ``flags`` (``--ask``, ``--no-load``, ...)."""
    from host_support import options

    store = str(tmp_path / "acp-store")

    def make(*flags: str, **agent_options: Any) -> Any:
        agent_options.setdefault("interrupt_grace", 2.0)
        return options(
            "acp",
            agent_options={
                "command": sys.executable,
                "args": [AGENT, "--store", store, *flags],
                **agent_options,
            },
        )

    make.store = store  # type: ignore[attr-defined]
    return make

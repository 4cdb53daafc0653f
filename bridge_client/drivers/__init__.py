"""Built-in drivers: ``echo`` (deterministic, for demos, tests and benchmarks) and ``shell``
(runs each prompt line as a command in the workspace).

Each module has ``make_driver(agent_options) -> Driver``; the bridge program loads them by
name (``--driver echo``) through :data:`BUILTIN_DRIVERS`.
"""
from __future__ import annotations

from typing import Dict

__all__ = ["BUILTIN_DRIVERS"]

BUILTIN_DRIVERS: Dict[str, str] = {
    "echo": "bridge_client.drivers.echo:make_driver",
    "shell": "bridge_client.drivers.shell:make_driver",
}
"""Driver name to its factory, as ``MODULE:CALLABLE``."""

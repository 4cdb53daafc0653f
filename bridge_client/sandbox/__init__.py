"""Sandboxes: where the agent works (the ``Sandbox`` protocol and its adapters).

The adapters load on first use (PEP 562): the bridge program, which imports this package's
``base`` only, never pays for the Docker and SSH adapters' imports.
"""
import importlib
from typing import TYPE_CHECKING, Any, List

from .base import Endpoint, ExecResult, Sandbox, SpawnedProcess

if TYPE_CHECKING:
    from .docker import DockerProcess, DockerSandbox
    from .local import LocalProcess, LocalSandbox
    from .ssh import SSHProcess, SSHSandbox

_LAZY = {
    "DockerProcess": ".docker",
    "DockerSandbox": ".docker",
    "LocalProcess": ".local",
    "LocalSandbox": ".local",
    "SSHProcess": ".ssh",
    "SSHSandbox": ".ssh",
}


def __getattr__(name: str) -> Any:
    """Import a lazily exported adapter (PEP 562) on first access; AttributeError for others."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> List[str]:
    """The public names, lazy ones included."""
    return sorted(set(__all__) | {n for n in globals() if n.startswith("__")})


__all__ = [
    "Sandbox", "SpawnedProcess", "ExecResult", "Endpoint", "LocalSandbox", "LocalProcess",
    "DockerSandbox", "DockerProcess", "SSHSandbox", "SSHProcess",
]

"""Sandboxes: where the agent works (the ``Sandbox`` protocol and its adapters)."""
from .base import Endpoint, ExecResult, Sandbox, SpawnedProcess
from .docker import DockerProcess, DockerSandbox
from .local import LocalProcess, LocalSandbox
from .ssh import SSHProcess, SSHSandbox

__all__ = [
    "Sandbox", "SpawnedProcess", "ExecResult", "Endpoint", "LocalSandbox", "LocalProcess",
    "DockerSandbox", "DockerProcess", "SSHSandbox", "SSHProcess",
]

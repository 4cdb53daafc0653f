"""Fixtures for the SSH sandbox tests: one real OpenSSH server for the whole run (started on
127.0.0.1 by tests/ssh/sshd_server.py, with its own keys, config and login user), and a
fresh remote folder per test. The tests skip, with the reason, where sshd cannot be started."""
from __future__ import annotations

import os
import sys
import tempfile
from typing import Iterator

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
for _path in (_HERE, os.path.dirname(_HERE), os.path.join(os.path.dirname(_HERE), "resilience")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from sshd_server import SSHServer, why_not_after_install  # noqa: E402


@pytest.fixture(scope="session")
def sshd() -> Iterator[SSHServer]:
    """A running test sshd and its login user (skips where that cannot be had)."""
    reason = why_not_after_install()
    if reason:
        pytest.skip(reason)
    try:
        import paramiko  # noqa: F401
    except ImportError:
        pytest.skip("paramiko is not installed (pip install -e '.[test]')")
    server = SSHServer(tempfile.mkdtemp(prefix="bc-sshd-"))
    try:
        server.start()
    except Exception as exc:
        server.stop()
        pytest.skip(f"sshd could not be started: {exc}")
    yield server
    server.stop()


@pytest.fixture
def remote_folder(sshd: SSHServer, request) -> Iterator[str]:
    """A fresh folder in the test user's home (the remote side of the sandbox)."""
    name = "ws-" + os.urandom(4).hex()
    yield sshd.folder_for(name)


@pytest.fixture
def ssh_sandbox(sshd: SSHServer, remote_folder: str, home) -> Iterator["object"]:
    """An SSHSandbox on the remote folder (closed afterwards)."""
    from bridge_client.sandbox.ssh import SSHSandbox

    sandbox = SSHSandbox(sshd.host, remote_folder, **sshd.options(reconnect_window=10.0))
    yield sandbox
    sandbox.close()

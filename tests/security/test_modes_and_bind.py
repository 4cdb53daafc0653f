"""B01, C17: after a real session the state directory is 0700 and every file in it 0600; the
bridge listens on loopback unless the launch file says otherwise (checked in /proc/net/tcp,
not only in listening.json)."""

from __future__ import annotations

import os
import stat

import pytest

import bridge_client as bc
from bridge_client.state_dir import identity
from host_support import options, session_options

pytestmark = pytest.mark.timeout(60)


def _mode(path: str) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _listening_addresses(port: int) -> set:
    """Local addresses (hex, as /proc/net/tcp writes them) of sockets listening on ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            address, hex_port = fields[1].split(":")
            if int(hex_port, 16) == port and fields[3] == "0A":  # 0A: LISTEN
                found.add(address)
    return found


def test_b01_state_directory_0700_and_its_files_0600_after_a_session(sandbox):
    old = os.umask(0o022)  # a usual umask: the modes must not come from it
    try:
        with bc.create_session(options("echo"), session_options(sandbox)) as session:
            list(session.turn("hello"))
            state_dir = identity.state_dir(sandbox.state_root, session.bridge_id)
            names = sorted(os.listdir(state_dir))
            assert {
                identity.LAUNCH_FILE,
                identity.TOKEN_FILE,
                identity.LISTENING_FILE,
                identity.LOCK_FILE,
            } <= set(names)
            assert identity.STORE_FILE in names and identity.LOG_FILE in names
            assert _mode(state_dir) == 0o700
            for name in names:
                path = os.path.join(state_dir, name)
                assert stat.S_ISREG(os.lstat(path).st_mode), f"{name} is a plain file"
                assert _mode(path) == 0o600, f"{name} is {oct(_mode(path))}"
            # The folders above it, up to the state root, are private too.
            folder = os.path.dirname(state_dir)
            while len(folder) >= len(sandbox.state_root):
                assert _mode(folder) & 0o077 == 0, f"{folder} is {oct(_mode(folder))}"
                folder = os.path.dirname(folder)
    finally:
        os.umask(old)


def test_b01_the_bridge_listens_on_loopback_by_default(make_bridge):
    bridge = make_bridge()
    assert bridge.info.host == "127.0.0.1"
    assert _listening_addresses(bridge.info.port) == {"0100007F"}, "127.0.0.1 only"


def test_b01_the_launch_file_may_ask_for_another_address(make_bridge):
    bridge = make_bridge(bind="0.0.0.0")
    assert bridge.info.host == "0.0.0.0"
    assert _listening_addresses(bridge.info.port) == {"00000000"}

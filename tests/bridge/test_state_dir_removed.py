"""A running bridge whose state directory is removed under it (``rm -rf`` of the state
folder): it stops, rather than writing its listening file into a new, empty folder and
serving on from a store that no longer has a name (B01, B02). A listening file removed on its
own is still written again."""
from __future__ import annotations

import os
import shutil

import pytest

from bridge_client.state_dir import identity
from bridge_harness import BridgeProcess, prepare_state, wait_until

pytestmark = pytest.mark.timeout(60)


def _names(path: str, pid: int) -> bool:
    data = identity.optional_read(path)
    return data is not None and identity.parse_listening(data).pid == pid


def test_b02_a_bridge_whose_state_directory_is_removed_stops_and_writes_no_listening_file(make_bridge):
    bridge = make_bridge()
    shutil.rmtree(bridge.state)
    os.makedirs(bridge.state, mode=0o700)  # what a host's next launch makes first
    assert bridge.wait(10) == 1
    assert os.listdir(bridge.state) == [], "nothing written into the new folder"


def test_b02_c05_the_bridge_of_a_new_state_directory_keeps_its_listening_file(make_bridge, tmp_path):
    old = make_bridge()
    shutil.rmtree(old.state)
    prepare_state(old.state)
    new = BridgeProcess(old.state, str(tmp_path / "workspace-new")).start()
    try:
        assert old.wait(10) == 1
        assert new.proc is not None and new.proc.poll() is None
        assert _names(new.listening_path, new.proc.pid)
        with new.connect() as client:
            assert client.value("Hello")["pid"] == new.proc.pid
    finally:
        new.stop()


def test_b01_a_listening_file_removed_on_its_own_is_written_again(make_bridge):
    bridge = make_bridge()
    assert bridge.proc is not None
    os.unlink(bridge.listening_path)
    assert wait_until(lambda: _names(bridge.listening_path, bridge.proc.pid), timeout=5)
    assert bridge.proc.poll() is None
    with bridge.connect() as client:
        assert client.value("Hello")["pid"] == bridge.proc.pid

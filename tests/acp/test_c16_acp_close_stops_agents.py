"""CloseSession stops the session's ACP agent and everything of its process group: the agent
(our acp_agent.py, a real process) starts a child in its group that ignores SIGTERM and
holds none of its pipes; ``release()`` must leave no process of that group, checked by
process group in /proc, not by name."""
from __future__ import annotations

import os
import re
import signal

import pytest

import bridge_client as bc
from host_support import session_options, wait_until

pytestmark = pytest.mark.timeout(60)


def _members(group: int) -> list:
    """The live (not zombie) processes of process group ``group``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if fields[2] == str(group).encode() and fields[0] != b"Z":
            found.append(int(name))
    return found


def test_c16_acp_release_leaves_no_process_of_the_agents_group(sandbox, acp_options):
    session = bc.create_session(acp_options(), session_options(sandbox))
    group = child = None
    try:
        turn = session.turn("pid\nspawn")
        assert list(turn)[-1].finish_reason == "stop"
        group = int(re.search(r"pid=(\d+)", turn.text()).group(1))
        child = int(re.search(r"child=(\d+)", turn.text()).group(1))
        assert os.getpgid(child) == group, "the child runs in the agent's process group"
        assert sorted(_members(group)) == sorted([group, child])
    finally:
        session.release()  # CloseSession
        try:
            assert wait_until(lambda: not _members(group), timeout=10), (
                f"process group {group} still has {_members(group)} after release()"
            )
        finally:
            if child is not None and child in _members(group or 0):
                os.kill(child, signal.SIGKILL)  # the old code leaves it: end it here

"""A bridge program that dies by a signal at every start (C04): a SIGSEGV, a SIGKILL from an
out-of-memory killer. That is a failed start, like an exit with status 1: the launcher
launches it again at most once, then raises ``BridgeLaunchError`` naming the signal, with the
tail of ``bridge.log`` (not a hundred launches and "did not answer within N s").

The bridge command is a real program (``/bin/sh``) that writes one line to its log and
kills itself with the signal; the launches are counted by those lines."""
from __future__ import annotations

import os
import shutil
import time

import pytest

import bridge_client as bc
from bridge_client.state_dir import identity
from host_support import options, session_options

pytestmark = pytest.mark.timeout(60)

LAUNCH_TIMEOUT = 10.0  # the old code relaunched for all of it; the new one stops after two


def _crashing_options(signal_name: str) -> bc.BridgeOptions:
    script = f'echo "crash-at-start pid $$"; kill -{signal_name} $$; sleep 5'
    base = options("echo")
    return bc.BridgeOptions(
        id="crasher", template=bc.Template(), command=shutil.which("sh") or "/bin/sh",
        args=("-c", script), token=base.token,
    )


@pytest.mark.parametrize("signal_name, status", [("SEGV", "-11 (SIGSEGV)"), ("KILL", "-9 (SIGKILL)")])
def test_c04_a_bridge_killed_by_a_signal_at_every_start_is_a_launch_error_naming_it(
    sandbox, signal_name, status
):
    opts = _crashing_options(signal_name)
    started = time.monotonic()
    with bc.create_session(opts, session_options(sandbox, launch_timeout=LAUNCH_TIMEOUT)) as session:
        with pytest.raises(bc.BridgeLaunchError) as caught:
            session.turn("hello")
        took = time.monotonic() - started
        log_path = os.path.join(identity.state_dir(sandbox.state_root, session.bridge_id), identity.LOG_FILE)
    message = str(caught.value)
    assert status in message, message
    assert "did not answer" not in message
    assert "crash-at-start pid" in caught.value.log_tail
    with open(log_path) as f:
        launches = sum(1 for line in f if line.startswith("crash-at-start pid"))
    assert 1 <= launches <= 2, f"{launches} launches"
    assert took < LAUNCH_TIMEOUT / 2, f"took {took:.1f} s"

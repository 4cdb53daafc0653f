"""Launch races (C05, B02): eight host processes launching the same bridge at once end with
one bridge process, and every host uses it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from host_support import SECRET, wait_until
from resilience_support import bridge_pid

pytestmark = pytest.mark.timeout(120)

HOSTS = 8

_HOST = textwrap.dedent(
    """
    import json, os, sys, time
    import bridge_client as bc
    workspace, secret, go = sys.argv[1], sys.argv[2], sys.argv[3]
    opts = bc.bridge_options("echo", secret=secret, bridge_idle_timeout=60)
    sandbox = bc.LocalSandbox(workspace)
    so = bc.CreateSessionOptions(workspace=bc.Workspace(sandbox), launch_timeout=60)
    session = bc.create_session(opts, so)
    print("ready", flush=True)
    deadline = time.monotonic() + 60
    while not os.path.exists(go) and time.monotonic() < deadline:   # start together
        time.sleep(0.005)
    with session:
        parts = list(session.turn("race"))
        print(json.dumps({"pid": session._hello.pid, "bridge": session.bridge_id,
                          "last": parts[-1].finish_reason}), flush=True)
    """
)


def test_c05_eight_processes_launching_at_once_end_with_one_bridge_pid(workspace, sandbox, tmp_path):
    go = str(tmp_path / "go")
    hosts = [
        subprocess.Popen(
            [sys.executable, "-c", _HOST, workspace, SECRET, go],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for _ in range(HOSTS)
    ]
    try:
        for host in hosts:  # every host imported the package and made its session
            assert host.stdout.readline().strip() == "ready", host.stderr.read() if host.poll() else ""
        open(go, "w").close()
        results = []
        for host in hosts:
            out, err = host.communicate(timeout=90)
            assert host.returncode == 0, err
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for host in hosts:
            if host.poll() is None:
                host.kill()
                host.wait(5)
    assert {r["last"] for r in results} == {"stop"}
    assert len({r["bridge"] for r in results}) == 1
    pids = {r["pid"] for r in results}
    assert len(pids) == 1, f"more than one bridge served: {sorted(pids)}"
    assert bridge_pid(sandbox, results[0]["bridge"]) == pids.pop(), "the winner holds the listening file"
    # The losers exited quietly: only the winner is left working in the workspace.
    from host_support import _pids_under

    assert wait_until(lambda: len(_pids_under(workspace)) == 1, timeout=10.0), _pids_under(workspace)
    assert os.path.exists(go)

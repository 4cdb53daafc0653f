"""A host that starts a shell turn with approvals on, reads it up to its approval request,
writes the turn-start JSON (the turn state) to a file, says so, and waits to be killed.

Usage: python host_with_pending_approval.py WORKSPACE STATE_FILE COMMAND
(BRIDGE_CLIENT_HOME and BRIDGE_CLIENT_SECRET come from the environment)."""
from __future__ import annotations

import os
import sys
import time

import bridge_client as bc


def main() -> None:
    workspace, state_file, command = sys.argv[1:4]
    opts = bc.bridge_options("shell", secret=os.environ["BRIDGE_CLIENT_SECRET"], bridge_idle_timeout=60.0)
    so = bc.CreateSessionOptions(workspace=bc.Workspace(bc.LocalSandbox(workspace)), approvals=True)
    session = bc.create_session(opts, so)
    turn = session.turn(command)
    for part in turn:
        if isinstance(part, bc.TurnStart):
            with open(state_file + ".tmp", "w", encoding="utf-8") as f:
                f.write(part.turn.to_json())
            os.rename(state_file + ".tmp", state_file)
        if isinstance(part, bc.ApprovalRequest):
            print("pending", part.request_id, flush=True)
            break
    time.sleep(120)  # killed by the test long before


if __name__ == "__main__":
    main()

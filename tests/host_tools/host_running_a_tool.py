"""A host whose host tool hangs: it starts an ``openai`` turn (the scripted model calls the
tool ``lookup``), writes the turn state to a file, and when the function starts it writes a
line to the marker file and waits to be killed.

Usage: python host_running_a_tool.py WORKSPACE STATE_FILE MARKER_FILE MOCK_LOG
(BRIDGE_CLIENT_HOME, BRIDGE_CLIENT_SECRET and PYTHONPATH come from the environment)."""
from __future__ import annotations

import os
import sys
import time

import bridge_client as bc


def main() -> None:
    workspace, state_file, marker, log = sys.argv[1:5]

    def lookup(key: str) -> dict:
        """Look a key up (hangs)."""
        with open(marker, "a", encoding="utf-8") as f:
            f.write(f"started {key}\n")
        time.sleep(60)  # killed by the test long before
        return {"key": key}

    opts = bc.bridge_options(
        "host_tools_mock:make_driver",
        agent_id="openai",
        agent_options={"model": "gpt-test", "mock": {"scenario": "host-lookup", "log": log}},
        secret=os.environ["BRIDGE_CLIENT_SECRET"],
        bridge_idle_timeout=60.0,
    )
    so = bc.CreateSessionOptions(workspace=bc.Workspace(bc.LocalSandbox(workspace)), tools=[lookup])
    session = bc.create_session(opts, so)
    turn = session.turn("look alpha up")
    for part in turn:
        if isinstance(part, bc.TurnStart):
            with open(state_file + ".tmp", "w", encoding="utf-8") as f:
                f.write(part.turn.to_json())
            os.rename(state_file + ".tmp", state_file)


if __name__ == "__main__":
    main()

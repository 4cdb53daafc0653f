"""A second host, in its own process: attaches to a container, runs one turn, prints JSON.

    python host_process.py CONTAINER_ID DRIVER AGENT_OPTIONS_JSON PROMPT

Prints ``{"pid": <bridge pid>, "instance": ..., "text": ..., "finish": ..., "bridge_id": ...}``
on one line, then exits (the bridge in the container stays up). The secret and the
BRIDGE_CLIENT_HOME come from the environment, as for any host.
"""
from __future__ import annotations

import json
import sys

import bridge_client as bc
from bridge_client.sandbox.docker import DockerSandbox


def main() -> int:
    container_id, driver, agent_options, prompt = sys.argv[1:5]
    opts = bc.bridge_options(
        driver, python="python3", agent_options=json.loads(agent_options), bridge_idle_timeout=60.0
    )
    sandbox = DockerSandbox.attach(container_id)
    try:
        session_options = bc.CreateSessionOptions(workspace=bc.Workspace(sandbox), launch_timeout=30.0)
        with bc.create_session(opts, session_options) as session:
            turn = session.turn(prompt)
            parts = list(turn)
            hello = session._hello
            assert hello is not None
            print(json.dumps({
                "pid": hello.pid, "instance": hello.instance, "text": turn.text(),
                "finish": parts[-1].type, "bridge_id": session.bridge_id,
            }))
    finally:
        sandbox.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

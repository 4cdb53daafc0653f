"""A host in its own process, on an SSH sandbox; prints JSON lines.

    python ssh_host.py CONFIG_JSON

CONFIG: ``host``, ``folder``, ``sandbox`` (SSHSandbox keyword arguments), ``driver``,
``agent_options``, ``prompt``, ``mode``:

- ``run``: one turn; prints ``{"pid", "instance", "text", "finish", "bridge_id"}``;
- ``start``: prints every part of a new turn as it is read (turn-start first), flushed, and
  keeps reading until the turn ends or the process is killed;
- ``continue``: continues ``state`` (a turn-start part's JSON) and prints every part, then
  ``{"text", "steps"}``.

The secret and BRIDGE_CLIENT_HOME come from the environment, as for any host.
"""
from __future__ import annotations

import json
import sys

import bridge_client as bc
from bridge_client.sandbox.ssh import SSHSandbox
from bridge_client.wire.parts import part_from_dict


def main() -> int:
    config = json.loads(sys.argv[1])
    opts = bc.bridge_options(
        config["driver"], python="python3", agent_options=config.get("agent_options"),
        bridge_idle_timeout=60.0,
    )
    sandbox = SSHSandbox(config["host"], config["folder"], **config["sandbox"])
    try:
        session_options = bc.CreateSessionOptions(
            workspace=bc.Workspace(sandbox), launch_timeout=60.0, resend_window=15.0,
            ping_interval=1.0, ping_timeout=2.0,
        )
        with bc.create_session(opts, session_options) as session:
            mode = config["mode"]
            if mode == "run":
                turn = session.turn(config["prompt"])
                parts = list(turn)
                hello = session._hello
                assert hello is not None
                print(json.dumps({
                    "pid": hello.pid, "instance": hello.instance, "text": turn.text(),
                    "finish": parts[-1].type, "bridge_id": session.bridge_id,
                }), flush=True)
            elif mode == "start":
                for part in session.turn(config["prompt"]):
                    print(json.dumps(part.to_dict()), flush=True)
            else:
                state = part_from_dict(json.loads(config["state"])).turn
                turn = session.continue_turn(state)
                for part in turn:
                    print(json.dumps(part.to_dict()), flush=True)
                print(json.dumps({"text": turn.text(), "steps": turn.steps}), flush=True)
    finally:
        sandbox.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

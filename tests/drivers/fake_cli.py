"""A stand-in for the ``claude`` and ``codex`` programs: prints recorded event streams in each
CLI's documented format (see the drivers' docstrings for where the formats come from).

Installed by the tests as ``bin/claude`` and ``bin/codex`` (small shell wrappers put first on
PATH) and driven by files in ``$FAKE_CLI_DIR``:

- ``scenario.json``: ``{"claude": [run, ...], "codex": [run, ...]}``; the Nth call of a
  program plays its Nth run (the last one again when calls outnumber runs).
- ``calls.jsonl``: one line appended per call: ``{"program", "argv", "stdin"}`` (``stdin``:
  the first line for claude, the whole input for codex), written before anything is printed.

A run: ``{"lines": [...], "exit": 0, "stderr": "...", "wait": "interrupt" | "signal" | "eof"}``.
``lines`` are printed one per line (objects as JSON, strings as they are, so a malformed line
is a string); a line ``{"__wait_file__": NAME}`` is not printed: the run waits there (at most
20 s) until the file NAME exists in ``$FAKE_CLI_DIR``. ``wait``: after the lines, block (at
most 20 s) until claude's interrupt control request arrives on stdin (then print an error
result), until SIGINT (then exit 130), or until stdin ends.
"""

import json
import os
import signal
import sys
import time


def main() -> int:
    program = sys.argv[1]
    argv = sys.argv[2:]
    folder = os.environ["FAKE_CLI_DIR"]
    with open(os.path.join(folder, "scenario.json")) as f:
        runs = json.load(f)[program]
    log = os.path.join(folder, "calls.jsonl")
    count = 0
    if os.path.exists(log):
        with open(log) as f:
            count = sum(1 for line in f if json.loads(line)["program"] == program)
    run = runs[min(count, len(runs) - 1)]
    interrupted = []
    signal.signal(signal.SIGINT, lambda *_: interrupted.append(True))
    if program == "claude":
        stdin = sys.stdin.readline()
    else:
        stdin = sys.stdin.read()
    with open(log, "a") as f:
        f.write(json.dumps({"program": program, "argv": argv, "stdin": stdin}) + "\n")
    for line in run.get("lines", []):
        if isinstance(line, dict) and "__wait_file__" in line:  # pause until the test says go
            go = os.path.join(folder, line["__wait_file__"])
            stop = time.monotonic() + 20
            while not os.path.exists(go) and time.monotonic() < stop:
                time.sleep(0.01)
            continue
        sys.stdout.write((line if isinstance(line, str) else json.dumps(line)) + "\n")
        sys.stdout.flush()
    if run.get("stderr"):
        sys.stderr.write(run["stderr"] + "\n")
        sys.stderr.flush()
    wait = run.get("wait")
    deadline = time.monotonic() + 20
    if wait == "interrupt":
        for line in sys.stdin:
            msg = json.loads(line)
            if msg.get("type") == "control_request" and msg["request"]["subtype"] == "interrupt":
                with open(log, "a") as f:
                    f.write(json.dumps({"program": program, "argv": ["<interrupt>"], "stdin": line}) + "\n")
                result = {
                    "type": "result",
                    "subtype": "error_during_execution",
                    "is_error": True,
                    "duration_ms": 5,
                    "duration_api_ms": 1,
                    "num_turns": 1,
                    "session_id": "sess-1",
                }
                print(json.dumps(result), flush=True)
                return 0
        return 0
    if wait == "signal":
        while not interrupted and time.monotonic() < deadline:
            time.sleep(0.02)
        return 130
    if wait == "eof":
        sys.stdin.read()
        return 0
    return int(run.get("exit", 0))


if __name__ == "__main__":
    sys.exit(main())

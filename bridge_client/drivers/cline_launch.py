"""The launcher the ``cline`` driver runs in place of ``cline --acp`` (in the agent's process
group, on the agent's stdio): ``python -m bridge_client.drivers.cline_launch [--base-url URL
--model M --key-env VAR --data-root DIR] -- CLINE_ARGV...``.

What it does for Cline, whose ACP mode runs its sessions in a detached helper,
``cline --cline-hub-daemon``, that listens on one port for the whole machine by default and
outlives the agent:

- gives the agent a hub of its own: ``CLINE_HUB_PORT`` a free port of 127.0.0.1 (unless the
  environment sets it), so agents of other sessions, bridges or users never share one (a
  shared hub runs with the environment of whoever started it first);
- with ``--base-url``: a Cline data folder of its own (``CLINE_DATA_DIR``, unless set), under
  ``--data-root``, one per HOME and working folder, whose provider settings
  (``settings/providers.json``, mode 0600) name the OpenAI-compatible server, the model and
  the key (read from the variable ``--key-env`` names), which is also ``CLINE_API_KEY`` (Cline's
  ACP mode asks for that variable before ``session/new``, and sends it as the key);
- runs Cline with the agent's stdin and stdout, passes SIGTERM and SIGINT on to it (a SIGTERM
  to the hub too), and once it exited ends the hub it started (its pid from the hub's lock
  file, checked against the process's command line) and exits with Cline's status.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from typing import List, Optional

__all__ = ["main", "write_provider_settings", "hub_pid"]

PROVIDER = "openai-compatible"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_provider_settings(data_dir: str, base_url: str, model: str, key: str) -> str:
    """Write ``data_dir/settings/providers.json`` (mode 0600, replaced whole); return its path."""
    folder = os.path.join(data_dir, "settings")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    settings = {"provider": PROVIDER, "apiKey": key, "model": model, "baseUrl": base_url}
    entry = {"settings": settings, "updatedAt": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
             "tokenSource": "manual"}
    data = {"version": 1, "lastUsedProvider": PROVIDER, "modes": {}, "providers": {PROVIDER: entry}}
    path = os.path.join(folder, "providers.json")
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(tmp, path)
    return path


def hub_pid(port: int) -> Optional[int]:
    """The pid of the running Cline hub that listens on ``port`` (``cline --cline-hub-daemon
    ... --port PORT``), read from ``/proc``; ``None`` when there is none. The port is this
    launcher's own, so no other agent's hub matches."""
    wanted = [b"--port", str(port).encode()]
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"--cline-hub-daemon" in argv and any(argv[i:i + 2] == wanted for i in range(len(argv) - 1)):
            return int(name)
    return None


def _end(pid: int) -> None:
    for sig, wait in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 1.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)


def main(argv: Optional[List[str]] = None) -> int:
    """Run Cline as the module docstring says; returns its exit status."""
    parser = argparse.ArgumentParser(prog="cline_launch")
    parser.add_argument("--base-url")
    parser.add_argument("--model", default="gpt-4o")
    parser.add_argument("--key-env", default="OPENAI_API_KEY")
    parser.add_argument("--data-root")
    parser.add_argument("--mcp-settings")
    parser.add_argument("cline", nargs=argparse.REMAINDER)
    parser.add_argument("--watch", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.watch:
        return _watch(args.watch)
    command = [a for a in args.cline if a != "--"] if args.cline[:1] == ["--"] else args.cline
    if not command:
        parser.error("the Cline command is missing")
    env = dict(os.environ)
    port = int(env.get("CLINE_HUB_PORT") or _free_port())
    env["CLINE_HUB_PORT"] = str(port)
    data_dir = env.get("CLINE_DATA_DIR")
    if args.base_url and not data_dir and args.data_root:
        where = f"{env.get('HOME', '')}\n{os.getcwd()}\n{args.base_url}\n{args.model}"
        data_dir = os.path.join(args.data_root, hashlib.sha256(where.encode()).hexdigest()[:16])
        env["CLINE_DATA_DIR"] = data_dir
    if args.base_url and data_dir:
        key = env.get(args.key_env, "")
        write_provider_settings(data_dir, args.base_url, args.model, key)
        # Cline's ACP mode wants CLINE_API_KEY set before session/new, and sends it as the key.
        env["CLINE_API_KEY"] = key or env.get("CLINE_API_KEY") or "none"
    if args.mcp_settings:  # the host tools' MCP server (Cline reads no other way in ACP mode)
        env["CLINE_MCP_SETTINGS_PATH"] = args.mcp_settings
    watchdog = _watchdog(port)
    try:
        child = subprocess.Popen(command, env=env)
    except OSError as exc:
        print(f"cannot run {command[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        return 127
    def stop(sig: int, _frame: object) -> None:
        child.send_signal(sig)
        if sig == signal.SIGTERM:  # being stopped: the group's SIGKILL may follow soon
            _signal_hub(port, signal.SIGTERM)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    code = child.wait()
    pid = hub_pid(port)
    if pid is not None:
        _end(pid)
    if watchdog is not None and watchdog.stdin is not None:
        watchdog.stdin.close()  # nothing left to watch: it exits
    return code


def _watchdog(port: int) -> "Optional[subprocess.Popen[bytes]]":
    """A process outside the agent's process group that ends the hub on ``port`` once this
    launcher is gone, however it ended (a SIGKILLed bridge's keeper kills the launcher's
    group, which the hub is not in): it waits for the end of a pipe only this launcher holds."""
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "bridge_client.drivers.cline_launch", "--watch", str(port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError:
        return None


def _watch(port: int) -> int:
    """The watchdog: wait for the end of stdin, then end the hub on ``port`` (when running)."""
    try:
        while sys.stdin.buffer.read(4096):
            pass
    except OSError:
        pass
    pid = hub_pid(port)
    if pid is not None:
        _end(pid)
    return 0


def _signal_hub(port: int, sig: int) -> None:
    pid = hub_pid(port)
    if pid is not None:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


if __name__ == "__main__":
    sys.exit(main())

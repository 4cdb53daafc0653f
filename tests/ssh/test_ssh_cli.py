"""The CLI on an SSH sandbox: ``--sandbox ssh://USER@HOST:PORT/PATH`` runs a turn there, and
``bridges`` and ``stop`` see and stop the remote bridge."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(90)


def _cli(*args: str, home: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, BRIDGE_CLIENT_HOME=home, BRIDGE_CLIENT_SECRET="cli-secret")
    return subprocess.run([sys.executable, "-m", "bridge_client", *args], env=env,
                          capture_output=True, text=True, timeout=80, stdin=subprocess.DEVNULL)


def test_cli_run_bridges_and_stop_on_an_ssh_sandbox(sshd, remote_folder, tmp_path):
    url = sshd.url(remote_folder) + f"?key={sshd.key}&known_hosts={sshd.known_hosts}"
    home = str(tmp_path / "home")
    ran = _cli("run", "--sandbox", url, "echo remote-$((20+1))\npwd", home=home)
    assert ran.returncode == 0, ran.stderr
    assert "remote-21" in ran.stdout and remote_folder in ran.stdout
    listed = _cli("bridges", "--json", "--sandbox", url, home=home)
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert len(rows) == 1 and rows[0]["alive"] is True and rows[0]["agent"] == "shell"
    assert rows[0]["pid"] in sshd.user_processes(), "the bridge runs as the remote user"
    stopped = _cli("stop", "--all", "--sandbox", url, home=home)
    assert stopped.returncode == 0, stopped.stderr
    assert f"stopped bridge {rows[0]['id']}" in stopped.stdout
    again = _cli("bridges", "--json", "--sandbox", url, home=home)
    assert json.loads(again.stdout.splitlines()[0])["alive"] is False


def test_cli_bad_ssh_urls_are_usage_errors(sshd, tmp_path):
    home = str(tmp_path / "home")
    missing = sshd.url("/no/such/folder") + f"?key={sshd.key}&known_hosts={sshd.known_hosts}"
    for url, said in [(missing, "does not exist"), ("ssh://host-only", "names no folder"),
                      ("ssh://u@h:99999/x", "bad port"), ("ssh://u@h/x?color=red", "unknown option"),
                      ("docker+tcp://h/x", "needs a port")]:
        done = _cli("run", "--sandbox", url, "true", home=home)
        assert done.returncode == 2, (url, done.stderr)
        assert said in done.stderr and "Traceback" not in done.stderr

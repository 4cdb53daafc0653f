"""An SSH sandbox as a user writes it: key and known_hosts files
named with ``~`` (as the scaling guide's example does), or that are missing. A real test sshd."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from bridge_client.sandbox.ssh import SSHSandbox

pytestmark = pytest.mark.timeout(90)


def _fake_home(tmp_path, sshd) -> str:
    home = tmp_path / "user-home"
    (home / ".ssh").mkdir(parents=True)
    shutil.copy(sshd.key, home / ".ssh" / "agent_ed25519")
    shutil.copy(sshd.known_hosts, home / ".ssh" / "known_hosts_test")
    return str(home)


def test_ssh_key_and_known_hosts_with_a_tilde_are_expanded(sshd, remote_folder, tmp_path, monkeypatch, home):
    # paramiko opens key_filename and known_hosts as given: "~/.ssh/..." failed, after the
    # connect window, as "the SSH host ... does not answer: No such file or directory".
    monkeypatch.setenv("HOME", _fake_home(tmp_path, sshd))
    sandbox = SSHSandbox(sshd.host, remote_folder, user=sshd.user, port=sshd.port,
                         key_filename="~/.ssh/agent_ed25519", known_hosts="~/.ssh/known_hosts_test",
                         allow_agent=False)
    try:
        assert sandbox.exec(["sh", "-c", "echo tilde-ok"]).stdout.strip() == b"tilde-ok"
    finally:
        sandbox.close()


@pytest.mark.parametrize("which", ["key_filename", "known_hosts"])
def test_a_missing_ssh_key_or_known_hosts_file_is_named_at_once(which, sshd, remote_folder, tmp_path):
    given = dict(key_filename=sshd.key, known_hosts=sshd.known_hosts)
    given[which] = str(tmp_path / "no-such-file")
    started = time.monotonic()
    with pytest.raises(FileNotFoundError) as caught:
        SSHSandbox(sshd.host, remote_folder, user=sshd.user, port=sshd.port, allow_agent=False, **given)
    assert "no-such-file" in str(caught.value) and "does not answer" not in str(caught.value)
    assert time.monotonic() - started < 2, "no connect was tried"
    with pytest.raises(ValueError, match="is not a file"):
        SSHSandbox(sshd.host, remote_folder, user=sshd.user, port=sshd.port, allow_agent=False,
                   **dict(given, **{which: str(tmp_path)}))


def test_cli_ssh_url_with_a_tilde_key_runs_and_a_missing_key_is_bad_input(sshd, remote_folder, tmp_path):
    env = dict(os.environ, BRIDGE_CLIENT_HOME=str(tmp_path / "bc-home"), BRIDGE_CLIENT_SECRET="s",
               HOME=_fake_home(tmp_path, sshd))

    def cli(*words: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "bridge_client", *words], env=env,
                              capture_output=True, text=True, timeout=80, stdin=subprocess.DEVNULL)

    url = sshd.url(remote_folder) + "?key=~/.ssh/agent_ed25519&known_hosts=~/.ssh/known_hosts_test"
    ok = cli("run", "--sandbox", url, "echo via-$((1+1))")
    assert ok.returncode == 0 and "via-2" in ok.stdout, ok.stderr
    bad = cli("run", "--sandbox", url.replace("agent_ed25519", "missing_key"), "true")
    assert bad.returncode == 2, bad.stderr
    assert "the SSH key file '~/.ssh/missing_key' does not exist" in bad.stderr, bad.stderr
    assert cli("stop", "--all", "--sandbox", url).returncode == 0

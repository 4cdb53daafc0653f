"""SSHSandbox against a real OpenSSH server: commands, timeouts, files, detached processes,
the sandbox id, the shared transport, and the refusals (host key, credentials)."""
from __future__ import annotations

import os
import socket
import stat
import subprocess
import time

import pytest

import bridge_client as bc
from bridge_client.sandbox.ssh import SSHProcess, SSHSandbox
from host_support import _alive, wait_until

pytestmark = pytest.mark.timeout(60)


def test_ssh_exec_gives_output_status_and_env_and_keeps_env_out_of_argv(ssh_sandbox, remote_folder):
    result = ssh_sandbox.exec(
        ["sh", "-c", 'echo "$SECRET_ONE"; pwd; echo oops >&2; ps -o args= -u "$(id -u)"; exit 3'],
        env={"SECRET_ONE": "it's a s€cret value"},
    )
    assert result.exit_code == 3
    lines = result.stdout.decode().splitlines()
    assert lines[0] == "it's a s€cret value"
    assert lines[1] == remote_folder, "commands run in the sandbox folder by default"
    assert not any("s€cret" in line for line in lines[2:]), "env values never show in a command line"
    assert result.stderr == b"oops\n"
    assert ssh_sandbox.exec(["pwd"], cwd="/").stdout == b"/\n"
    assert ssh_sandbox.exec(["kill", "-0", "1"]).exit_code in (0, 1), "shell builtins run too"
    with pytest.raises(ValueError):
        ssh_sandbox.exec(["true"], env={"NOT A NAME": "x"})


def test_ssh_exec_missing_program_or_folder_is_file_not_found(ssh_sandbox):
    with pytest.raises(FileNotFoundError):
        ssh_sandbox.exec(["no-such-program-here"])
    with pytest.raises(FileNotFoundError):
        ssh_sandbox.exec(["true"], cwd="/no/such/folder")


def test_ssh_exec_timeout_kills_the_remote_process_group(ssh_sandbox, remote_folder):
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        ssh_sandbox.exec(["sh", "-c", "sleep 60 & echo $! > child.pid; wait"], timeout=1.0)
    assert time.monotonic() - started < 10.0
    child = int(open(os.path.join(remote_folder, "child.pid")).read())
    assert wait_until(lambda: not _alive(child), timeout=5.0), "the command's children die with it"


def test_ssh_files_are_written_atomically_with_their_mode(ssh_sandbox, sshd):
    path = ssh_sandbox.state_root + "/deep/er/file.json"
    ssh_sandbox.write_file(path, b"first", mode=0o640)
    ssh_sandbox.write_file(path, b"second" * 100000, mode=0o600)
    assert ssh_sandbox.read_file(path) == b"second" * 100000
    info = os.stat(path)
    assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == sshd.uid
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700, "folders are made 0700"
    assert os.listdir(os.path.dirname(path)) == ["file.json"], "no temporary file is left"
    with pytest.raises(FileNotFoundError):
        ssh_sandbox.read_file(ssh_sandbox.state_root + "/nothing-here")
    with pytest.raises(OSError):
        ssh_sandbox.write_file("/proc/no-write-here/x", b"x")


def test_ssh_spawn_outlives_the_ssh_connection_and_reports_its_exit_status(sshd, remote_folder, home):
    first = SSHSandbox(sshd.host, remote_folder, **sshd.options())
    log = first.state_root + "/logs/spawned.log"
    process = first.spawn(["sh", "-c", "sleep 1.5; echo done; exit 4"], log_path=log)
    assert process.poll() is None and process.pid is not None
    first.close()  # the last sandbox on the link: the SSH connection closes
    sshd.kill_connections()
    assert _alive(process.pid), "the detached process survives its connection"
    second = SSHSandbox(sshd.host, remote_folder, **sshd.options())
    try:
        again = SSHProcess(second, process.pid, process.status_path)
        assert wait_until(lambda: again.poll() is not None, timeout=10.0)
        assert again.poll() == 4
        assert second.read_file(log) == b"done\n"
        assert stat.S_IMODE(os.stat(log).st_mode) == 0o600
        with pytest.raises(FileNotFoundError):
            second.spawn(["no-such-program-here"])
    finally:
        second.close()


def test_ssh_sandbox_id_is_stable_per_user_host_port_and_folder(sshd, remote_folder, home):
    other = sshd.folder_for("other-" + os.urandom(3).hex())
    a = SSHSandbox(sshd.host, remote_folder, **sshd.options())
    b = SSHSandbox(sshd.host, remote_folder + "/./", **sshd.options())
    c = SSHSandbox(sshd.host, other, **sshd.options())
    try:
        assert a.id == b.id and a.id.startswith("ssh-")
        assert c.id != a.id
        assert a.state_root != c.state_root
        assert a._link is c._link, "one SSH transport per (host, port, user) in a process"
    finally:
        for s in (a, b, c):
            s.close()
    with pytest.raises(FileNotFoundError):
        SSHSandbox(sshd.host, remote_folder + "/missing", **sshd.options())


def test_ssh_unknown_host_key_and_wrong_user_key_are_refused(sshd, remote_folder, tmp_path, home):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    with pytest.raises(bc.UntrustedEndpoint):
        SSHSandbox(sshd.host, remote_folder, **dict(sshd.options(), known_hosts=str(empty)))
    key = tmp_path / "not_authorized"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    other_key = open(str(key) + ".pub").read().split()[1]
    wrong = tmp_path / "wrong"  # the right name, another key: a changed host key
    wrong.write_text(f"[{sshd.host}]:{sshd.port} ssh-ed25519 {other_key}\n")
    with pytest.raises(bc.UntrustedEndpoint):
        SSHSandbox(sshd.host, remote_folder, **dict(sshd.options(), known_hosts=str(wrong)))
    with pytest.raises(bc.Unauthorized):
        SSHSandbox(sshd.host, remote_folder, **dict(sshd.options(), key_filename=str(key)))


def test_ssh_a_forked_child_gets_its_own_connection_and_the_parent_keeps_its_own(ssh_sandbox, sshd):
    assert ssh_sandbox.exec(["true"]).ok
    before = ssh_sandbox._link
    pid = os.fork()
    if pid == 0:  # the child: exits with 0 only when its own link works
        code = 1
        try:
            link_ok = ssh_sandbox._link is not before
            code = 0 if link_ok and ssh_sandbox.exec(["echo", "child"]).stdout == b"child\n" else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert ssh_sandbox._link is before
    assert ssh_sandbox.exec(["echo", "parent"]).stdout == b"parent\n", "the parent's connection is intact"


def test_c21_ssh_spawn_refuses_a_symlinked_log_and_writes_nothing_through_it(
    ssh_sandbox, remote_folder, tmp_path
):
    victim = tmp_path / "victim"
    victim.write_bytes(b"before\n")
    log = os.path.join(remote_folder, "state", "bridge.log")
    os.makedirs(os.path.dirname(log))
    os.symlink(victim, log)
    with pytest.raises(bc.UntrustedFile, match="symlink"):
        ssh_sandbox.spawn(["sh", "-c", "echo ran"], log_path=log)
    assert victim.read_bytes() == b"before\n"


def test_ssh_a_port_nothing_listens_on_fails_at_once_naming_it(sshd, remote_folder, home):
    """A first connect that is refused is a wrong host or port: it fails with the reason,
    instead of retrying for the whole reconnect window (here a minute)."""
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    options = dict(sshd.options(reconnect_window=60.0), port=port)
    started = time.monotonic()
    with pytest.raises(bc.SandboxGone, match="connection refused"):
        SSHSandbox(sshd.host, remote_folder, **options)
    assert time.monotonic() - started < 30, "not retried for the reconnect window"

"""C21 in a container: ``DockerSandbox.read_private_file`` trusts a state file only when the
archive's tar header says it is a regular file of the container's user with mode 0600 (a
symlink is refused, a FIFO never opened), so the host never sends its token to a port a
planted ``listening.json`` names."""
from __future__ import annotations

import posixpath
import time

import pytest

import bridge_client as bc
from bridge_client.sandbox.docker import DockerSandbox
from docker_support import BASE_IMAGE, TEST_LABEL, remove_container

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def container(request, docker_client, test_images):
    sandbox = DockerSandbox.create(
        BASE_IMAGE, network_mode="none", labels={TEST_LABEL: f"{request.module.__name__}:private"}
    )
    yield sandbox
    sandbox.close()
    remove_container(docker_client, sandbox.id)


def test_c21_docker_private_reads_check_type_owner_and_mode_from_the_tar_header(container):
    sandbox = container
    folder = posixpath.join(sandbox.state_root, "bridges", "b")
    path = posixpath.join(folder, "listening.json")
    sandbox.write_file(path, b'{"ok": 1}', mode=0o600)
    assert sandbox.read_private_file(path) == b'{"ok": 1}'

    def planted(script: str) -> None:
        done = sandbox.exec(["sh", "-c", script, "sh", path], cwd="/")
        assert done.ok, done.stderr

    planted('chmod 644 "$1"')
    with pytest.raises(bc.UntrustedFile, match="mode 644"):
        sandbox.read_private_file(path)
    planted('chmod 600 "$1" && chown 65534 "$1"')
    with pytest.raises(bc.UntrustedFile, match="user id 65534"):
        sandbox.read_private_file(path)
    planted('rm -f "$1" && echo "{}" > /tmp/elsewhere && chmod 600 /tmp/elsewhere '
            '&& ln -s /tmp/elsewhere "$1"')
    with pytest.raises(bc.UntrustedFile, match="link"):
        sandbox.read_private_file(path)
    assert sandbox.read_file(path) == b"{}\n"  # the general read still follows links
    planted('rm -f "$1" && mkfifo -m 600 "$1"')
    with pytest.raises(bc.UntrustedFile, match="not a regular file"):
        sandbox.read_private_file(path)
    with pytest.raises(FileNotFoundError):
        sandbox.read_private_file(posixpath.join(folder, "missing.json"))


def test_c21_docker_spawn_never_appends_through_a_symlinked_log(container):
    """A log path that is a symlink (planted where the bridge's log goes) is refused before
    anything is written: the target stays as it was and the process exits 126 unrun."""
    sandbox = container
    target = "/tmp/victim"
    sandbox.write_file(target, b"before\n", mode=0o644)
    log = posixpath.join(sandbox.state_root, "bridges", "s", "bridge.log")
    done = sandbox.exec(["sh", "-c", 'mkdir -p "${2%/*}" && ln -s "$1" "$2"', "sh", target, log], cwd="/")
    assert done.ok, done.stderr
    proc = sandbox.spawn(["sh", "-c", "echo ran"], log_path=log)
    deadline = time.monotonic() + 10
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() == 126
    assert sandbox.read_file(target) == b"before\n"

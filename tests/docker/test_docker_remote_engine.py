"""DockerSandbox on an engine reached over TCP with TLS (client certificates required) and over
SSH, from the docker SDK's options (DOCKER_HOST, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH, a
TLSConfig); the bridge's port through the engine's exec tunnel; the CLI's ``docker+tcp://``
and ``docker+ssh://`` sandboxes with ``run``, ``bridges`` and ``stop``."""
from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from typing import Iterator

import pytest

import bridge_client as bc
from bridge_client.sandbox.docker import IMAGE_LABEL, DockerSandbox
from bridge_client.sandbox.docker_remote import engine_client
from docker_support import BASE_IMAGE, TEST_LABEL, remove_container
from tls_engine import TLSEngine

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ssh"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "host"))

from host_support import options, session_options  # noqa: E402

pytestmark = pytest.mark.timeout(150)


@pytest.fixture
def tls_engine(docker_client, tmp_path) -> Iterator[TLSEngine]:
    engine = TLSEngine(str(tmp_path))
    yield engine
    engine.close()


@pytest.fixture
def remote_image(docker_client, test_images) -> Iterator[str]:
    """A tag of the base image private to this test; its containers are removed by id."""
    name = f"bridge-client-test-remote-{secrets.token_hex(4)}"
    docker_client.images.get(BASE_IMAGE).tag(name, "latest")
    image = f"{name}:latest"
    yield image
    for found in docker_client.api.containers(all=True, filters={"label": f"{IMAGE_LABEL}={image}"}):
        remove_container(docker_client, found["Id"])
    docker_client.api.remove_image(image)


def test_shell_turn_on_an_engine_over_tls_with_client_certificates(
    tls_engine, docker_client, test_images, home, request
):
    client = engine_client(environment=dict(os.environ, **tls_engine.environment()))
    assert client.api.base_url.startswith("https://127.0.0.1:")
    sandbox = DockerSandbox.create(BASE_IMAGE, client=client, network_mode="none",
                                   labels={TEST_LABEL: request.node.name[:200]})
    try:
        opts = options("shell", python="python3")
        with bc.create_session(opts, session_options(sandbox, launch_timeout=60.0)) as session:
            turn = session.turn("echo over-tls-$((40+2))\npwd")
            parts = list(turn)
        assert parts[-1].finish_reason == "stop"
        assert "over-tls-42" in turn.text() and "/workspace" in turn.text()
        assert tls_engine.served >= 3, "commands, files and the tunnel all went through TLS"
    finally:
        sandbox.close()
        remove_container(docker_client, sandbox.id)
        client.close()


def test_an_engine_over_tls_refuses_no_client_certificate_and_another_ca(tls_engine, tmp_path):
    import docker
    import trustme

    ca = os.path.join(tls_engine.cert_path, "ca.pem")
    url = f"tcp://127.0.0.1:{tls_engine.port}"
    with pytest.raises(bc.UntrustedEndpoint):
        engine_client(url, tls=docker.tls.TLSConfig(ca_cert=ca, verify=True))
    other = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    certs = (os.path.join(tls_engine.cert_path, "cert.pem"), os.path.join(tls_engine.cert_path, "key.pem"))
    with pytest.raises(bc.UntrustedEndpoint):
        engine_client(url, tls=docker.tls.TLSConfig(client_cert=certs, ca_cert=str(other), verify=True))
    with pytest.raises(bc.SandboxGone):
        engine_client("tcp://127.0.0.1:9", tls=False, timeout=5.0)


def _cli(*args: str, home: str, extra_env=None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BRIDGE_CLIENT_")}
    env.update(BRIDGE_CLIENT_HOME=home, BRIDGE_CLIENT_SECRET="remote-engine-secret", **(extra_env or {}))
    return subprocess.run([sys.executable, "-m", "bridge_client", *args], env=env, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)


def _run_list_stop(sandbox: str, home: str, env) -> None:
    ran = _cli("run", "--sandbox", sandbox, "echo remote-engine-$((1+1))", home=home, extra_env=env)
    assert ran.returncode == 0, ran.stderr
    assert "remote-engine-2" in ran.stdout
    listed = _cli("bridges", "--json", "--sandbox", sandbox, home=home, extra_env=env)
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert len(rows) == 1 and rows[0]["alive"] is True, rows
    stopped = _cli("stop", "--all", "--sandbox", sandbox, home=home, extra_env=env)
    assert stopped.returncode == 0, stopped.stderr
    assert f"stopped bridge {rows[0]['id']}" in stopped.stdout


def test_cli_docker_tcp_sandbox_runs_lists_and_stops_over_tls(
    tls_engine, remote_image, docker_client, tmp_path
):
    env = {k: v for k, v in tls_engine.environment().items() if k != "DOCKER_HOST"}
    _run_list_stop(f"docker+tcp://127.0.0.1:{tls_engine.port}/{remote_image}", str(tmp_path / "home"), env)
    made = docker_client.api.containers(filters={"label": f"{IMAGE_LABEL}={remote_image}"})
    assert len(made) == 1, "the container was made on that engine, for that image"


@pytest.fixture
def docker_sshd(docker_client, tmp_path) -> Iterator[object]:
    """A test sshd whose login user may use the engine (group docker) and has the docker CLI."""
    from sshd_server import SSHServer, why_not_after_install

    reason = why_not_after_install()
    if reason:
        pytest.skip(reason)
    if shutil.which("docker") is None:
        pytest.skip("the docker CLI is not installed (docker+ssh runs `docker system dial-stdio` there)")
    import tempfile

    server = SSHServer(tempfile.mkdtemp(prefix="bc-sshd-"))  # the login user reads its keys there
    try:
        server.start()
        subprocess.run(["usermod", "-aG", "docker", server.user], check=True, capture_output=True)
    except Exception as exc:
        server.stop()
        pytest.skip(f"sshd could not be started for the docker+ssh test: {exc}")
    yield server
    server.stop()
    shutil.rmtree(server.folder, ignore_errors=True)


def test_docker_sandbox_on_an_engine_over_ssh_runs_commands_files_and_the_tunnel(
    docker_sshd, docker_client, test_images, tmp_path, monkeypatch, request
):
    import time

    import requests

    ssh_home = tmp_path / "user-home"
    (ssh_home / ".ssh").mkdir(parents=True)
    shutil.copy(docker_sshd.key, ssh_home / ".ssh" / "id_ed25519")
    shutil.copy(docker_sshd.known_hosts, ssh_home / ".ssh" / "known_hosts")
    monkeypatch.setenv("HOME", str(ssh_home))  # the SDK's paramiko reads ~/.ssh there
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    client = engine_client(f"ssh://{docker_sshd.user}@127.0.0.1:{docker_sshd.port}", tls=False)
    sandbox = DockerSandbox.create(BASE_IMAGE, client=client, network_mode="none",
                                   labels={TEST_LABEL: request.node.name[:200]})
    try:
        assert sandbox.exec(["sh", "-c", "echo over-ssh; exit 3"]).exit_code == 3
        sandbox.write_file("/tmp/x/f", b"through ssh")
        assert sandbox.read_file("/tmp/x/f") == b"through ssh"
        sandbox.spawn(["python3", "-m", "http.server", "--bind", "127.0.0.1", "8123"], log_path="/tmp/h.log")
        endpoint = sandbox.expose(8123)
        url = endpoint.url.replace("ws://", "http://", 1)
        deadline = time.monotonic() + 20.0
        while True:
            try:
                with requests.Session() as http:
                    http.trust_env = False
                    assert http.get(url, timeout=5.0).status_code == 200
                break
            except requests.RequestException:
                assert time.monotonic() < deadline, "the exec tunnel over SSH never answered"
                time.sleep(0.2)
        assert docker_sshd.connection_pids(), "the engine is reached through the test sshd"
    finally:
        sandbox.close()
        remove_container(docker_client, sandbox.id)
        client.close()
    with pytest.raises(bc.Unauthorized):
        os.remove(ssh_home / ".ssh" / "id_ed25519")
        engine_client(f"ssh://{docker_sshd.user}@127.0.0.1:{docker_sshd.port}", tls=False)

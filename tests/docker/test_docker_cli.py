"""The CLI's ``--sandbox docker:IMAGE``, run as a user runs it (real processes, a real engine):
the container is made once for the image and reused by later commands (run, bridges, stop)."""
from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys

import pytest

from bridge_client.sandbox.docker import IMAGE_LABEL
from docker_support import BASE_IMAGE, TEST_LABEL, remove_container

pytestmark = pytest.mark.timeout(150)


@pytest.fixture
def cli_image(docker_client, test_images, request):
    """A tag of the base image private to this test (so no other container of it is reused);
    the containers the CLI makes for it are removed by id, and the tag with them."""
    name = f"bridge-client-test-cli-{secrets.token_hex(4)}"
    docker_client.images.get(BASE_IMAGE).tag(name, "latest")
    image = f"{name}:latest"
    yield image
    for found in docker_client.api.containers(all=True, filters={"label": f"{IMAGE_LABEL}={image}"}):
        remove_container(docker_client, found["Id"])
    docker_client.api.remove_image(image)


def cli(*args, home, timeout=90):
    env = {k: v for k, v in os.environ.items() if not k.startswith("BRIDGE_CLIENT_")}
    env.update(BRIDGE_CLIENT_HOME=home, BRIDGE_CLIENT_SECRET="cli-test-secret")
    return subprocess.run(
        [sys.executable, "-m", "bridge_client.cli", *args],
        capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL,
    )


def test_sandbox_docker_image_runs_in_a_container_made_once_and_reused(cli_image, docker_client, tmp_path):
    home = str(tmp_path / "home")
    sandbox = f"docker:{cli_image}"
    first = cli("run", "echo made in $(hostname) > /workspace/out.txt", "cat /workspace/out.txt",
                "--sandbox", sandbox, home=home)
    assert first.returncode == 0, first.stderr
    assert first.stdout.rstrip().splitlines()[-1] == "[finished] stop"
    made = docker_client.api.containers(filters={"label": f"{IMAGE_LABEL}={cli_image}"})
    assert len(made) == 1
    container = made[0]
    assert container["Labels"].get("io.bridge-client.sandbox") == "1"
    assert TEST_LABEL not in container["Labels"]
    assert f"made in {container['Id'][:12]}" in first.stdout

    listed = cli("bridges", "--sandbox", sandbox, "--json", home=home)
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert len(rows) == 1 and rows[0]["agent"] == "shell" and rows[0]["alive"] is True

    second = cli("run", "echo again", "--sandbox", sandbox, home=home)
    assert second.returncode == 0 and "again\n" in second.stdout, second.stderr
    assert [c["Id"] for c in docker_client.api.containers(filters={"label": f"{IMAGE_LABEL}={cli_image}"})] \
        == [container["Id"]], "the same container was reused"

    stopped = cli("stop", rows[0]["id"], "--sandbox", sandbox, home=home)
    assert stopped.returncode == 0, stopped.stderr
    assert f"stopped bridge {rows[0]['id']}" in stopped.stdout


def test_sandbox_docker_without_an_image_or_with_a_missing_one_is_a_clear_error(docker_client, tmp_path):
    home = str(tmp_path / "home")
    empty = cli("run", "true", "--sandbox", "docker:", home=home)
    assert empty.returncode == 2 and "needs an image name" in empty.stderr
    no_such = f"docker:bridge-client-no-such-image-{secrets.token_hex(4)}"
    missing = cli("run", "true", "--sandbox", no_such, home=home)
    assert missing.returncode == 1 and "is not on the Docker engine" in missing.stderr
    assert "Traceback" not in missing.stderr

"""Fixtures for the Docker sandbox tests: a real Docker engine, the test images, and
containers that are removed by id after each test.

The engine: the root conftest's ``docker_engine`` (tests/prerequisites.py): the one
``DOCKER_HOST`` (or the default socket) names, when it answers; else docker.io is installed
(root, apt) and a dockerd started (``--iptables=false --bridge=none --storage-driver=vfs``)
and stopped by its pid at the end. The tests skip, with the reason, only when no engine can be
reached or started.

The images come from tests/docker/build_base_image.sh (Debian packages, cached). Every
container carries the label ``io.bridge-client.sandbox`` plus ``io.bridge-client.test=<test>``:
leftovers are found with ``docker ps -a --filter label=io.bridge-client.test``.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any, Callable, Iterator, List

import pytest


from prerequisites import apt_install  # noqa: E402
from docker_support import (  # noqa: E402
    BASE_IMAGE, HERE, IMAGE_TAG, NOPYTHON_IMAGE, TEST_LABEL, remove_container,
)


@pytest.fixture(scope="session")
def docker_client(docker_engine) -> Any:
    """A ``docker.DockerClient`` on a live engine (see the root conftest's ``docker_engine``)."""
    if docker_engine.client is None:
        pytest.skip(docker_engine.reason)
    _remove_leftovers(docker_engine.client)
    return docker_engine.client


def _remove_leftovers(client: Any) -> None:
    """Remove stopped containers of earlier test runs that were killed before their fixtures
    ran (an engine restart stops them). Running ones may belong to a run going on now."""
    for status in ("exited", "created", "dead"):
        for found in client.api.containers(all=True, filters={"label": TEST_LABEL, "status": status}):
            remove_container(client, found["Id"])


@pytest.fixture(scope="session")
def test_images(docker_client) -> List[str]:
    """The base image (Debian + python3) and the one without Python, built once and cached."""
    script = os.path.join(HERE, "build_base_image.sh")
    have = all(_has_image(docker_client, name) for name in (BASE_IMAGE, NOPYTHON_IMAGE))
    if not have and shutil.which("debootstrap") is None:
        why = apt_install(["debootstrap"])
        if why is not None:
            pytest.skip(f"the test images are missing and debootstrap cannot be had to build them: {why}")
    done = subprocess.run(
        ["bash", script, IMAGE_TAG], stdin=subprocess.DEVNULL, capture_output=True, timeout=900
    )
    if done.returncode != 0:
        pytest.fail(f"building the test images failed: {done.stderr.decode('utf-8', 'replace')[-2000:]}")
    return [BASE_IMAGE, NOPYTHON_IMAGE]


def _has_image(client: Any, name: str) -> bool:
    try:
        client.images.get(name)
        return True
    except Exception:
        return False


@pytest.fixture
def make_container(request, docker_client, test_images) -> Iterator[Callable[..., Any]]:
    """``make_container(image=BASE_IMAGE, **create_options) -> DockerSandbox``; every
    container made is closed and removed (by id) after the test."""
    from bridge_client.sandbox.docker import DockerSandbox

    made: List[Any] = []

    def make(image: str = BASE_IMAGE, **kw: Any) -> Any:
        kw.setdefault("network_mode", "none")
        labels = {TEST_LABEL: request.node.name[:200], **kw.pop("labels", {})}
        sandbox = DockerSandbox.create(image, labels=labels, **kw)
        made.append(sandbox)
        return sandbox

    yield make
    for sandbox in made:
        sandbox.close()
        remove_container(docker_client, sandbox.id)


@pytest.fixture(scope="module")
def prepared(request, docker_client, test_images) -> Iterator[Any]:
    """One container per test module with the bridge installed by ``bridge_template()``
    (from host-built wheels; the container has no network). Tests on it use distinct agent
    options, so each gets its own bridge."""
    import bridge_client as bc
    from bridge_client.sandbox.docker import DockerSandbox

    sandbox = DockerSandbox.create(
        BASE_IMAGE, network_mode="none", labels={TEST_LABEL: f"{request.module.__name__}:prepared"}
    )
    try:
        bc.bridge_template("python3").run(sandbox)
        yield sandbox
    finally:
        sandbox.close()
        remove_container(docker_client, sandbox.id)

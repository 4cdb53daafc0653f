"""Fixtures for the Docker sandbox tests: a real Docker engine, the test images, and
containers that are removed by id after each test.

The engine: the one ``DOCKER_HOST`` (or the default socket) names, when it answers; .ci/run
starts one before the tests. When none answers and ``dockerd`` is installed and we are root,
one is started here (``--iptables=false --bridge=none --storage-driver=vfs``, as on CI) and
stopped by its pid at the end. The tests skip, with the reason, only when no engine can be
reached or started.

The images come from tests/docker/build_base_image.sh (Debian packages, cached). Every
container carries the label ``io.bridge-client.sandbox`` plus ``io.bridge-client.test=<test>``:
leftovers are found with ``docker ps -a --filter label=io.bridge-client.test``.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Any, Callable, Iterator, List

import pytest


from docker_support import (  # noqa: E402
    BASE_IMAGE, ENGINE_WAIT, HERE, IMAGE_TAG, NOPYTHON_IMAGE, TEST_LABEL, remove_container,
)


def _client_or_none() -> Any:
    try:
        import docker
    except ImportError:
        return None
    try:
        client = docker.from_env(timeout=30)
        client.ping()
        return client
    except Exception:
        return None


def _drop_stale_pid_file(path: str = "/var/run/docker.pid") -> None:
    """A dockerd killed earlier leaves its pid file, and a new one refuses to start while it
    names a live process (the pid may have been reused): drop it unless it names a dockerd."""
    try:
        with open(path) as f:
            pid = f.read().strip()
        with open(f"/proc/{pid}/comm") as f:
            if f.read().strip() == "dockerd":
                return
    except OSError:
        pass
    try:
        os.remove(path)
    except OSError:
        pass


def _start_dockerd(tmp: str) -> "subprocess.Popen[bytes]":
    _drop_stale_pid_file()
    log = open(os.path.join(tmp, "dockerd.log"), "wb")
    try:
        return subprocess.Popen(
            ["dockerd", "--iptables=false", "--bridge=none", "--storage-driver=vfs"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
    finally:
        log.close()


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    """A ``docker.DockerClient`` on a live engine (started here only when none answers)."""
    try:
        import docker  # noqa: F401
    except ImportError:
        pytest.skip("the docker SDK for Python is not installed (pip install -e '.[test]')")
    client = _client_or_none()
    started = None
    tmp = None
    if client is None:
        if shutil.which("dockerd") is None or os.geteuid() != 0:
            pytest.skip(
                "no Docker engine answers (DOCKER_HOST or /var/run/docker.sock), and none can be started "
                "here: dockerd is not installed (apt-get install docker.io) or we are not root"
            )
        tmp = tempfile.mkdtemp(prefix="bridge-client-dockerd-")
        started = _start_dockerd(tmp)
        deadline = time.monotonic() + ENGINE_WAIT
        while client is None and time.monotonic() < deadline and started.poll() is None:
            time.sleep(0.2)
            client = _client_or_none()
        if client is None:
            started.kill()
            started.wait()
            with open(os.path.join(tmp, "dockerd.log"), "rb") as f:
                tail = f.read()[-1500:].decode("utf-8", "replace")
            pytest.skip(f"no Docker engine answers and the dockerd started here did not come up: {tail}")
    _remove_leftovers(client)
    yield client
    client.close()
    if started is not None:
        started.send_signal(signal.SIGTERM)
        try:
            started.wait(timeout=20)
        except subprocess.TimeoutExpired:
            started.kill()
            started.wait()


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
        pytest.skip(f"the test images are missing and debootstrap is not installed to build them ({script})")
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

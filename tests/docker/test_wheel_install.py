"""A wheel is enough: the package's wheel, built from the source tree and installed (not
editable) in a fresh venv, runs the main job, ``bridge-client run ... --sandbox DIR``, in a
LocalSandbox and in a DockerSandbox. In the container the bridge comes from the installed
distribution (a wheel rebuilt from its installed files), never by name from a package index:
the venv's pip is pointed at an index that does not exist, so asking one would fail.

The wheel and the venv are cached (``~/.cache/bridge-client/test-wheel``), per digest of the
sources and per Python: only the first run after a change builds them.
"""
from __future__ import annotations

import fcntl
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import zipfile
from typing import Dict, Iterator, Tuple

import pytest

from bridge_client.sandbox.docker import IMAGE_LABEL
from bridge_client.sandbox.wheelhouse import _tree_digest
from docker_support import BASE_IMAGE, remove_container
from host_support import kill_all_under
from prerequisites import cache_dir

pytestmark = pytest.mark.timeout(600)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_PIP_TIMEOUT = 600


def _run(argv, **kw) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, **kw)
    assert done.returncode == 0, f"{argv}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    return done


def _build_wheel(folder: str, files) -> str:
    """``pip wheel`` of a copy of the source tree (a build writes build/ next to its sources)."""
    src = os.path.join(folder, "src")
    for rel in files:
        os.makedirs(os.path.dirname(os.path.join(src, rel)), exist_ok=True)
        shutil.copy2(os.path.join(ROOT, rel), os.path.join(src, rel))
    out = os.path.join(folder, "dist")
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", out]
    done = subprocess.run([*pip, "--no-build-isolation", src], capture_output=True, timeout=_PIP_TIMEOUT)
    if done.returncode != 0:  # no setuptools here: let pip fetch the build requirements
        _run([*pip, src], timeout=_PIP_TIMEOUT)
    shutil.rmtree(src)
    (wheel,) = os.listdir(out)
    return os.path.join(out, wheel)


@pytest.fixture(scope="module")
def wheel_venv() -> Tuple[str, str]:
    """``(venv folder, wheel path)``: a venv with the wheel installed (with the bridge and
    docker extras)."""
    digest, files = _tree_digest(ROOT)
    version = f"{sys.version_info[0]}{sys.version_info[1]}"
    folder = cache_dir("test-wheel", f"{digest}-py{version}-bridge-docker")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder at a time; a venv cannot be moved once made
        venv = os.path.join(folder, "venv")
        done = os.path.join(folder, ".done")
        if not os.path.exists(done):
            shutil.rmtree(venv, ignore_errors=True)
            shutil.rmtree(os.path.join(folder, "dist"), ignore_errors=True)
            wheel = _build_wheel(folder, files)
            clean = _env(folder)
            clean.pop("PIP_INDEX_URL")  # the dependencies come from the index (or pip's cache)
            _run([sys.executable, "-m", "venv", venv], timeout=120, env=clean)
            _run([os.path.join(venv, "bin", "pip"), "install", "--quiet", "--disable-pip-version-check",
                  f"{wheel}[bridge,docker]"], timeout=_PIP_TIMEOUT, env=clean)
            with open(done, "w") as f:
                f.write(wheel)
        with open(done) as f:
            return venv, f.read()


def _env(home: str) -> Dict[str, str]:
    dropped = ("BRIDGE_CLIENT_", "PYTHON", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    env.update(
        BRIDGE_CLIENT_HOME=home,
        BRIDGE_CLIENT_SECRET="wheel-test-secret",
        # Any index lookup for the bridge would go here and fail: the bridge must come from
        # the installed files. (The container's dependencies come from the wheel cache.)
        PIP_INDEX_URL="http://127.0.0.1:9/no-index/",
    )
    return env


def test_the_wheel_installs_not_editable_in_a_fresh_venv(wheel_venv, tmp_path):
    venv, wheel = wheel_venv
    assert os.path.basename(wheel).startswith("bridge_client-") and wheel.endswith("-py3-none-any.whl")
    code = (
        "import bridge_client, importlib.metadata as m; print(bridge_client.__file__); "
        "print(m.distribution('bridge-client').read_text('direct_url.json') or '')"
    )
    done = _run([os.path.join(venv, "bin", "python"), "-c", code], cwd=str(tmp_path), env=_env(str(tmp_path)))
    where, direct_url = done.stdout.split("\n", 1)
    assert where.startswith(os.path.join(venv, "lib")) and "site-packages" in where
    assert '"editable": true' not in direct_url


def test_the_installed_wheel_runs_the_main_job_in_a_local_sandbox(wheel_venv, tmp_path):
    venv, _ = wheel_venv
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    home = str(tmp_path / "home")
    cli = os.path.join(venv, "bin", "bridge-client")
    try:
        done = subprocess.run(
            [cli, "run", "echo from-the-wheel > w.txt", "cat w.txt", "--sandbox", str(workspace)],
            capture_output=True, text=True, cwd=str(tmp_path), env=_env(home), timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert "from-the-wheel" in done.stdout and done.stdout.rstrip().endswith("[finished] stop")
        assert (workspace / "w.txt").read_text() == "from-the-wheel\n"
        stopped = subprocess.run([cli, "stop", "--all", "--sandbox", str(workspace)], capture_output=True,
                                 text=True, env=_env(home), timeout=60)
        assert stopped.returncode == 0 and "Traceback" not in stopped.stderr, stopped.stderr
    finally:
        kill_all_under(str(workspace))


@pytest.fixture
def private_image(docker_client, test_images) -> Iterator[str]:
    """A tag of the base image private to this test (no container of it exists yet, so the
    bridge is installed afresh); the containers made for it are removed by id, then the tag."""
    name = f"bridge-client-test-wheel-{secrets.token_hex(4)}"
    docker_client.images.get(BASE_IMAGE).tag(name, "latest")
    image = f"{name}:latest"
    yield image
    for found in docker_client.api.containers(all=True, filters={"label": f"{IMAGE_LABEL}={image}"}):
        remove_container(docker_client, found["Id"])
    docker_client.api.remove_image(image)


def test_the_installed_wheel_runs_the_main_job_in_a_docker_sandbox(wheel_venv, private_image, tmp_path):
    venv, _ = wheel_venv
    home = str(tmp_path / "home")
    cli = os.path.join(venv, "bin", "bridge-client")
    sandbox = f"docker:{private_image}"
    cache = tempfile.mkdtemp(prefix="wheelhouse-", dir=str(tmp_path))
    env = _env(home)
    # The dependencies' wheels for the container come from the shared host cache; the
    # package's own wheel is rebuilt from the venv's installed files into this fresh cache.
    shared = os.path.join(cache_dir("wheelhouse"))
    if os.path.isdir(shared):
        for name in os.listdir(shared):
            if name.startswith("deps-"):
                os.symlink(os.path.join(shared, name), os.path.join(cache, name))
    env["BRIDGE_CLIENT_WHEEL_CACHE"] = cache
    if not any(n.startswith("deps-") for n in os.listdir(cache)):
        env.pop("PIP_INDEX_URL")  # first run on this machine: the dependencies need an index
    done = subprocess.run(
        [cli, "run", "echo from-the-wheel > /tmp/w.txt", "cat /tmp/w.txt", "--sandbox", sandbox],
        capture_output=True, text=True, cwd=str(tmp_path), env=env, timeout=480,
    )
    assert done.returncode == 0, done.stderr
    assert "from-the-wheel" in done.stdout and done.stdout.rstrip().endswith("[finished] stop")
    rebuilt = [n for n in os.listdir(cache) if n.startswith("package-") and "-installed-" in n]
    assert rebuilt, os.listdir(cache)  # the bridge came from the installed files
    stopped = subprocess.run([cli, "stop", "--all", "--sandbox", sandbox], capture_output=True, text=True,
                             env=env, timeout=120)
    assert stopped.returncode == 0, stopped.stderr
    assert "Traceback" not in stopped.stderr and "stopped bridge" in stopped.stdout


def test_the_wheel_rebuilt_from_the_installed_files_installs_the_same_files(wheel_venv, tmp_path):
    venv, wheel = wheel_venv
    python = os.path.join(venv, "bin", "python")
    code = (
        "import sys; from bridge_client.sandbox.installed_wheel import installed_wheel; "
        "print(installed_wheel(sys.argv[1]))"
    )
    cache = tmp_path / "cache"
    cache.mkdir()
    env = _env(str(tmp_path))
    rebuilt = _run([python, "-c", code, str(cache)], cwd=str(tmp_path), env=env).stdout.strip()
    again = _run([python, "-c", code, str(cache)], cwd=str(tmp_path), env=env).stdout.strip()
    assert rebuilt == again  # built once per content digest
    target = tmp_path / "target"
    pip = [python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target", str(target)]
    _run([*pip, rebuilt], env=env, timeout=120)

    def names(path):
        with zipfile.ZipFile(path) as zf:
            return sorted(n for n in zf.namelist() if not n.endswith("/RECORD"))

    assert names(rebuilt) == names(wheel)  # what was built from the sources, file for file
    for name in names(wheel):
        if ".dist-info/" not in name:
            with zipfile.ZipFile(wheel) as zf:
                assert (target / name).read_bytes() == zf.read(name), name


def test_the_wheel_metadata_is_ready_for_an_index(wheel_venv):
    import email.parser

    _, wheel = wheel_venv
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
        msg = email.parser.BytesParser().parsebytes(zf.read(meta))
    assert any(n.endswith(".dist-info/LICENSE") or "/licenses/LICENSE" in n for n in names), names
    classifiers = msg.get_all("Classifier")
    for minor in range(9, 14):
        assert f"Programming Language :: Python :: 3.{minor}" in classifiers
    assert "License :: OSI Approved :: MIT License" in classifiers
    assert msg["Requires-Python"] == ">=3.9"
    assert msg["Description-Content-Type"] == "text/markdown"
    assert "](docs/" not in msg.get_payload() and "bridge_client/py.typed" in names

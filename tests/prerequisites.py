"""What some tests need besides Python, set up by the tests themselves on a fresh machine
(one with Python, npm and the package registries, and apt when we are root), cached so that
only the first run pays for it; or a skip whose reason names what is missing.

- The Effect interop peers' npm packages: ``npm ci`` from ``tests/interop/package-lock.json``
  into ``~/.cache/bridge-client/npm/interop-<lock digest>``, linked as
  ``tests/interop/node_modules``. A new lock file gets a new folder.
- A Docker engine: the one that answers (``DOCKER_HOST`` or the default socket) is used as
  it is and never stopped. When none answers and we are root with apt, Debian's
  ``docker.io`` (and ``debootstrap``, for the test images) are installed and a ``dockerd`` is
  started (without iptables, bridge network or overlayfs: what a container-like CI machine
  allows), then stopped by its pid by the last suite run on the machine that uses it.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Any, Callable, List, Optional

TESTS = os.path.dirname(os.path.abspath(__file__))
INTEROP = os.path.join(TESTS, "interop")
NPM_TIMEOUT = 900.0  # seconds for one `npm ci` (a slow registry on a loaded machine)
APT_TIMEOUT = 1200.0  # seconds for apt-get update + install
ENGINE_WAIT = 30.0  # seconds for a dockerd started here to answer


def cache_dir(*parts: str) -> str:
    """``$XDG_CACHE_HOME/bridge-client/...`` (default ``~/.cache/bridge-client/...``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "bridge-client", *parts)


def _digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


# ------------------------------------------------------------------------------ npm


def interop_node_modules(skip: Callable[[str], Any]) -> str:
    """Make ``tests/interop/node_modules`` hold the packages its lock file pins; return it.

    A real ``node_modules`` folder there (a developer's own ``npm ci``) is left as it is;
    otherwise it becomes a link to the cached install for this lock file, which is made with
    ``npm ci`` when missing.

    Args:
        skip: called with the reason when it cannot be had (``pytest.skip``).
    """
    target = os.path.join(INTEROP, "node_modules")
    if os.path.isdir(target) and not os.path.islink(target):
        return target
    lock = os.path.join(INTEROP, "package-lock.json")
    cached = cache_dir("npm", f"interop-{_digest(lock)}")
    modules = os.path.join(cached, "node_modules")
    if not os.path.isdir(modules):
        npm = shutil.which("npm")
        if npm is None:
            skip("npm is not installed: the Effect interop tests need Node.js >= 20 and npm")
        os.makedirs(os.path.dirname(cached), exist_ok=True)
        work = tempfile.mkdtemp(prefix=".tmp-", dir=os.path.dirname(cached))
        try:
            for name in ("package.json", "package-lock.json"):
                shutil.copy2(os.path.join(INTEROP, name), os.path.join(work, name))
            done = subprocess.run(
                [str(npm), "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                cwd=work, stdin=subprocess.DEVNULL, capture_output=True, timeout=NPM_TIMEOUT,
            )
            if done.returncode != 0:
                tail = (done.stdout + done.stderr)[-1500:].decode("utf-8", "replace")
                skip(f"`npm ci` for the Effect interop tests failed (registry unreachable?): {tail}")
            try:
                os.rename(work, cached)
            except OSError:  # another run cached it meanwhile
                if not os.path.isdir(modules):
                    raise
        finally:
            shutil.rmtree(work, ignore_errors=True)
    if os.path.realpath(target) != os.path.realpath(modules):
        link = f"{target}.{os.getpid()}.tmp"
        os.symlink(modules, link)
        os.replace(link, target)  # atomic: a stale link to another lock's packages is swapped
    return target


# ------------------------------------------------------------------------------ docker


def docker_client_or_none() -> Any:
    """A ``docker.DockerClient`` whose engine answers, else ``None``."""
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


def apt_install(packages: List[str]) -> Optional[str]:
    """Install Debian packages with apt-get when we are root and have it; return why not
    (``None`` when they were installed)."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return f"{' and '.join(packages)}: not installed, and no apt-get as root to install them"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    # One apt at a time: the suite's workers (pytest-xdist) may want the SSH and the Docker
    # packages at once, and a second apt-get fails at once on dpkg's lock. The timeout waits
    # for an apt run that is not ours.
    os.makedirs(cache_dir(), exist_ok=True)
    with open(cache_dir(".apt.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for argv in (
            ["apt-get", "update", "-qq"],
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends",
             "-o", f"DPkg::Lock::Timeout={APT_TIMEOUT:.0f}", *packages],
        ):
            try:
                done = subprocess.run(
                    argv, stdin=subprocess.DEVNULL, capture_output=True, env=env, timeout=APT_TIMEOUT
                )
            except subprocess.TimeoutExpired:
                return f"`{' '.join(argv)}` ran longer than {APT_TIMEOUT:g} s"
            if done.returncode != 0:
                return f"`{' '.join(argv)}` failed: {done.stderr[-800:].decode('utf-8', 'replace')}"
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


# A test dockerd is shared by every suite run on the machine (pytest-xdist workers, and runs
# side by side): each run holds a shared lock on _USERS while it uses it, and the run that ends
# last stops the dockerd whose pid _STARTED names, whichever run started it.
_USERS = ".dockerd.users"
_STARTED = ".dockerd.started"
STOP_WAIT = 20.0  # seconds for a test dockerd to exit after SIGTERM before SIGKILL


def _is_dockerd(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip() == "dockerd"
    except OSError:
        return False


def _running(pid: int) -> bool:
    """Whether the dockerd ``pid`` still runs; reaps it when it is our child (an exited child
    keeps its /proc entry, name included, until it is reaped)."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:  # another process's child (or gone)
        pass
    return _is_dockerd(pid)


def _stop_pid(pid: int) -> None:
    """SIGTERM the dockerd ``pid`` (not necessarily our child), SIGKILL after ``STOP_WAIT``."""
    try:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_WAIT
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _running(pid):
            os.kill(pid, signal.SIGKILL)
            # A SIGKILLed process is gone a moment later, not at once: wait for that (bounded).
            deadline = time.monotonic() + 5.0
            while _running(pid) and time.monotonic() < deadline:
                time.sleep(0.02)
    except ProcessLookupError:
        pass


class DockerEngine:
    """The engine the Docker tests use: found, or installed and started here.

    Attributes:
        client: a ``docker.DockerClient`` on it, or ``None`` with ``reason`` saying why.
        started: the ``dockerd`` process started here (``None`` for an engine that was
            already running: that one is never stopped by this run, unless a suite run started
            it and this run is the last to use it).
    """

    def __init__(self) -> None:
        self.client: Any = None
        self.reason = ""
        self.started: Optional["subprocess.Popen[bytes]"] = None
        self._users: Any = None  # the open _USERS file, holding this run's shared lock

    def start(self) -> "DockerEngine":
        """Find an engine that answers, or install and start one; never raises."""
        try:
            import docker  # noqa: F401
        except ImportError:
            self.reason = "the docker SDK for Python is not installed (pip install -e '.[test]')"
            return self
        os.makedirs(cache_dir(), exist_ok=True)
        # One run at a time finds or starts the engine (two would start two dockerds on one
        # socket); the shared lock waits while a last user stops its dockerd.
        with open(cache_dir(".dockerd.start.lock"), "w") as starting:
            fcntl.flock(starting, fcntl.LOCK_EX)
            self._join()
            self._find_or_start()
        return self

    def _join(self) -> None:
        """Count this run among the engine's users (until :meth:`stop`)."""
        self._users = open(cache_dir(_USERS), "w")
        fcntl.flock(self._users, fcntl.LOCK_SH)

    def _find_or_start(self) -> None:
        self.client = docker_client_or_none()
        if self.client is not None:
            return
        wanted = (("docker.io", "dockerd"), ("debootstrap", "debootstrap"))
        missing = [package for package, exe in wanted if not shutil.which(exe)]
        if missing:
            why = apt_install(missing)
            if shutil.which("dockerd") is None:
                self.reason = f"no Docker engine answers (DOCKER_HOST or /var/run/docker.sock) and {why}"
                return
        if os.geteuid() != 0:
            self.reason = "no Docker engine answers, and starting dockerd needs root"
            return
        tmp = tempfile.mkdtemp(prefix="bridge-client-dockerd-")
        _drop_stale_pid_file()
        log_path = os.path.join(tmp, "dockerd.log")
        with open(log_path, "wb") as log:
            self.started = subprocess.Popen(
                ["dockerd", "--iptables=false", "--bridge=none", "--storage-driver=vfs"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        with open(cache_dir(_STARTED), "w") as f:
            f.write(str(self.started.pid))
        deadline = time.monotonic() + ENGINE_WAIT
        while self.client is None and time.monotonic() < deadline and self.started.poll() is None:
            time.sleep(0.2)
            self.client = docker_client_or_none()
        if self.client is None:
            self._stop_started()
            with open(log_path, "rb") as f:
                tail = f.read()[-1500:].decode("utf-8", "replace")
            self.reason = f"no Docker engine answers and the dockerd started here did not come up: {tail}"

    def _stop_started(self) -> None:
        """Stop the dockerd a suite run started (its pid in _STARTED), and forget it."""
        try:
            with open(cache_dir(_STARTED)) as f:
                pid = int(f.read().strip() or 0)
            os.remove(cache_dir(_STARTED))
        except (OSError, ValueError):
            pid = 0
        if pid > 0 and _is_dockerd(pid):
            _stop_pid(pid)
        if self.started is not None:
            self.started.poll()  # reap it when it was our child
            self.started = None

    def stop(self) -> None:
        """Close the client; when no other run uses the engine, stop the dockerd a suite run
        started (by its pid), if any."""
        if self.client is not None:
            self.client.close()
            self.client = None
        users, self._users = self._users, None
        if users is None:
            return
        try:
            fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # another run still uses it: the last one to end stops it
            users.close()
            return
        try:
            self._stop_started()
        finally:
            users.close()

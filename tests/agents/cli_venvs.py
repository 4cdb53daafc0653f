"""Install the agent CLIs the tests of ``test_real_agents_cline_vibe_aider.py`` run, each into
a cached private prefix under ``~/.cache/bridge-client/``, never globally, once (a file lock
keeps two test runs from installing at once; the install goes to a temporary folder renamed
into place, so a half install is never used):

- the Cline CLI from npm, pinned by ``npm-cline/package.json`` and its lock:
  ``agents-cline/<digest of the lock>/node_modules/.bin/cline``;
- Aider (PyPI ``aider-chat``) and Mistral Vibe (PyPI ``mistral-vibe``, Python 3.12 or
  later), pinned, each in a venv of its own: ``agents-py/<package>@<version>-py<X.Y>/bin/``.

Tests skip, naming what is missing, when node, npm or a Python recent enough is absent, or
the install fails."""
from __future__ import annotations

import fcntl
import glob
import hashlib
import os
import shutil
import subprocess
import tempfile
from typing import Callable, Optional, Tuple

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
CLINE = os.path.join(HERE, "npm-cline")
PY_CLIS = {"aider": ("aider-chat", "0.86.2", (3, 10)), "vibe": ("mistral-vibe", "3.0.2", (3, 12))}
"""Driver name to (PyPI package, pinned version, the oldest Python it runs on)."""


def _cache(name: str) -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "bridge-client", name)


def _installed(cache: str, key: str, install: Callable[[str], None]) -> str:
    """``cache/key``, made by ``install(work_folder)`` under a lock when it is missing."""
    prefix = os.path.join(cache, key)
    marker = os.path.join(prefix, ".installed")
    if os.path.exists(marker):
        return prefix
    os.makedirs(cache, exist_ok=True)
    with open(os.path.join(cache, f".{key}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(marker):
            return prefix
        work = tempfile.mkdtemp(prefix=f".{key}.install-", dir=cache)
        try:
            install(work)
            open(os.path.join(work, ".installed"), "w").close()
            shutil.rmtree(prefix, ignore_errors=True)
            os.rename(work, prefix)  # a venv's scripts name their own folder: see _py_install
            work = ""
        finally:
            if work:
                shutil.rmtree(work, ignore_errors=True)
    return prefix


def _run(argv, what: str, timeout: float, cwd: Optional[str] = None) -> None:
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.skip(f"{what} did not finish within {timeout:g} s")
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        tail = [line for line in lines if "WARNING" not in line][-3:]
        pytest.skip(f"{what} failed (registry unreachable?): {' | '.join(tail)}")


def cline_program(timeout: float = 900.0) -> str:
    """The pinned ``cline`` program, installed first when the cache lacks it."""
    for program in ("node", "npm"):
        if shutil.which(program) is None:
            pytest.skip(f"{program} is not installed: the Cline CLI needs Node.js and npm")
    h = hashlib.sha256()
    for name in ("package.json", "package-lock.json"):
        with open(os.path.join(CLINE, name), "rb") as f:
            h.update(f.read())

    def install(work: str) -> None:
        for name in ("package.json", "package-lock.json"):
            shutil.copy(os.path.join(CLINE, name), work)
        # Not `npm ci`: npm calls this lock out of sync for the empty versions cline gives its
        # optional platform packages; `install` with the lock present installs the locked tree.
        argv = ["npm", "install", "--no-save", "--no-audit", "--no-fund", "--ignore-scripts"]
        argv.append("--loglevel=error")
        _run(argv, "npm ci of tests/agents/npm-cline (cline 3.0.65)", timeout, cwd=work)

    prefix = _installed(_cache("agents-cline"), h.hexdigest()[:16], install)
    return os.path.join(prefix, "node_modules", ".bin", "cline")


def python_at_least(version: Tuple[int, int]) -> Optional[str]:
    """A Python interpreter of ``version`` or later on this machine (``python3.N`` on
    ``PATH`` that really runs, then pyenv's versions), or ``None``."""
    names = [f"python3.{minor}" for minor in range(14, version[1] - 1, -1)] + ["python3"]
    candidates = [shutil.which(n) for n in names]
    root = os.environ.get("PYENV_ROOT") or os.path.join(os.path.expanduser("~"), ".pyenv")
    candidates += sorted(glob.glob(os.path.join(root, "versions", "3.*", "bin", "python3")), reverse=True)
    check = f"import sys; sys.exit(0 if sys.version_info[:2] >= {tuple(version)!r} else 1)"
    for path in candidates:
        if not path:
            continue
        try:
            if subprocess.run([path, "-c", check], capture_output=True, timeout=30).returncode == 0:
                return path
        except (OSError, subprocess.TimeoutExpired):
            continue
    return None


def py_program(driver: str, program: str, timeout: float = 900.0) -> str:
    """``program`` of the pinned PyPI package of ``driver`` (``aider``, ``vibe``), from its
    venv, installed first when the cache lacks it."""
    package, version, oldest = PY_CLIS[driver]
    python = python_at_least(oldest)
    if python is None:
        pytest.skip(f"{package} needs Python {oldest[0]}.{oldest[1]} or later, and this machine has none")
    got = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                         capture_output=True, text=True, timeout=30).stdout.strip()
    cache = _cache("agents-py")
    key = f"{package}@{version}-py{got}"

    def install(work: str) -> None:
        # A venv's scripts hold its absolute path: build it where it will stay, then move
        # that folder aside into `work` only to mark it whole (see below).
        final = os.path.join(cache, key)
        shutil.rmtree(final, ignore_errors=True)
        _run([python, "-m", "venv", final], f"making a venv for {package}", 300)
        pip = [os.path.join(final, "bin", "python"), "-m", "pip", "install", "--quiet"]
        _run([*pip, f"{package}=={version}"], f"pip install {package}=={version}", timeout)
        os.rmdir(work)
        os.rename(final, work)

    prefix = _installed(cache, key, install)
    path = os.path.join(prefix, "bin", program)
    if not os.access(path, os.X_OK):
        pytest.skip(f"{path} is missing from the installed venv")
    return path

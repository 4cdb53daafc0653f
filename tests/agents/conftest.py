"""Fixtures for the real agent CLIs: the npm packages pinned in this folder's
``package-lock.json``, installed once (``npm install --no-save`` with the lock) into a private cached prefix
(``~/.cache/bridge-client/agents/<lock digest>/``, never the global one), the scripted model
server, and per CLI the offline configuration (environment, settings files in a private HOME)
that points it at that server.

Without npm, or when the install fails (no registry), the tests skip and say what is missing.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, Optional

import pytest

from cli_setups import SETUPS
from model_server import ModelServer

HERE = os.path.dirname(os.path.abspath(__file__))
LOCK = os.path.join(HERE, "package-lock.json")
PROGRAMS = {"claude-code": "claude", "codex": "codex", "gemini": "gemini", "qwen": "qwen", "pi": "pi"}
INSTALL_TIMEOUT = 1200.0


def _cache_root() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "bridge-client", "agents")


def _install() -> str:
    """The prefix with the pinned CLIs (installed when missing); raises RuntimeError saying why
    it cannot be had."""
    with open(LOCK, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    root = _cache_root()
    prefix = os.path.join(root, digest)
    done = os.path.join(prefix, ".installed")
    if os.path.exists(done):
        return prefix
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is not installed (the real agent CLIs come from npm)")
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, f".{digest}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test run may be installing the same lock
        if os.path.exists(done):
            return prefix
        work = f"{prefix}.tmp-{os.getpid()}"
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        for name in ("package.json", "package-lock.json"):
            shutil.copy(os.path.join(HERE, name), work)
        try:
            run = subprocess.run(
                # Not `npm ci`: npm 11 calls this lock out of sync for the empty versions that
                # @teddyzhu/clipboard (of qwen-code) gives its optional platform packages;
                # `install` with the lock present installs the locked tree all the same.
                [npm, "install", "--prefix", work, "--no-save", "--no-audit", "--no-fund"],
                capture_output=True,
                text=True,
                timeout=INSTALL_TIMEOUT,
            )
        except subprocess.TimeoutExpired:
            shutil.rmtree(work, ignore_errors=True)
            raise RuntimeError(f"npm install of {LOCK} took over {INSTALL_TIMEOUT:.0f} s") from None
        if run.returncode != 0:
            shutil.rmtree(work, ignore_errors=True)
            tail = " ".join((run.stdout + run.stderr).split())[-400:]
            raise RuntimeError(f"npm install of {LOCK} failed (registry unreachable?): {tail}")
        shutil.rmtree(prefix, ignore_errors=True)
        os.rename(work, prefix)
        open(done, "w").close()
    return prefix


@pytest.fixture(scope="session")
def agent_clis() -> str:
    """The prefix holding the pinned CLIs (``node_modules/.bin/<program>``); skips when they
    cannot be installed."""
    try:
        return _install()
    except (RuntimeError, OSError) as exc:
        pytest.skip(f"the real agent CLIs are missing: {exc}")


@pytest.fixture
def model() -> Iterator[ModelServer]:
    """A scripted model server on 127.0.0.1 (stopped afterwards)."""
    with ModelServer() as server:
        yield server


@dataclass
class RealCLI:
    """One real CLI set up for a test: its driver name, the ``agent_options`` that run it, and
    its private HOME (settings, transcripts)."""

    driver: str
    agent_options: Dict[str, Any]
    home: str




@pytest.fixture
def real_cli(agent_clis, model, tmp_path, monkeypatch) -> Callable[..., RealCLI]:
    """``real_cli(driver, **more_options)``: the CLI of ``driver`` pointed at ``model``, with a
    private HOME; the bridge launched by the test inherits this environment."""

    def make(driver: str, **more: Any) -> RealCLI:
        home = str(tmp_path / "user-home")
        os.makedirs(home, exist_ok=True)
        monkeypatch.setenv("HOME", home)
        monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
        opts = SETUPS[driver](model, home, monkeypatch.setenv)
        opts["executable"] = os.path.join(agent_clis, "node_modules", ".bin", PROGRAMS[driver])
        opts["interrupt_grace"] = 2.0
        opts.update(more)
        return RealCLI(driver, opts, home)

    return make


def cli_version(agent_clis: str, package: str) -> Optional[str]:
    """The installed version of ``package`` in the prefix (None when absent)."""
    try:
        with open(os.path.join(agent_clis, "node_modules", package, "package.json")) as f:
            return str(json.load(f)["version"])
    except (OSError, ValueError, KeyError):
        return None

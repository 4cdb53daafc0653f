"""Install the agent CLIs of ``tests/agents/npm-more`` (package.json and its lock: the GitHub
Copilot CLI and Zed's codex-acp) from npm into a cached private prefix,
``~/.cache/bridge-client/agents-more/<digest of the lock>/``: never the global prefix, once per
lock (a file lock keeps two test runs from installing at once; the install goes to a
temporary folder renamed into place, so a half install is never used). OpenCode comes from
the main lock of this folder (the ``agent_clis`` fixture).

Tests skip, naming what is missing, when node or npm is absent or npm cannot install."""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile

import pytest

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "npm-more")
FILES = ("package.json", "package-lock.json")
AGENTS = "@github/copilot and @zed-industries/codex-acp"


def _digest() -> str:
    h = hashlib.sha256()
    for name in FILES:
        with open(os.path.join(HERE, name), "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]


def more_clis_prefix(timeout: float = 900.0) -> str:
    """The prefix holding ``node_modules`` of the locked CLIs, installing it first when the
    cache lacks it. Skips the test when node or npm is missing or the install fails."""
    for program in ("node", "npm"):
        if shutil.which(program) is None:
            pytest.skip(f"{program} is not installed: the real agent CLI tests need Node.js and npm")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    cache = os.path.join(base, "bridge-client", "agents-more")
    prefix = os.path.join(cache, _digest())
    marker = os.path.join(prefix, ".installed")
    if os.path.exists(marker):
        return prefix
    os.makedirs(cache, exist_ok=True)
    with open(os.path.join(cache, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(marker):
            return prefix
        work = tempfile.mkdtemp(prefix=".install-", dir=cache)
        try:
            for name in FILES:
                shutil.copy(os.path.join(HERE, name), work)
            done = subprocess.run(
                ["npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error"],
                cwd=work,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            if done.returncode != 0:
                tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
                pytest.skip(f"npm could not install {AGENTS} (tests/agents/npm-more): {' | '.join(tail)}")
            open(os.path.join(work, ".installed"), "w").close()
            shutil.rmtree(prefix, ignore_errors=True)
            os.rename(work, prefix)
            work = ""
        except subprocess.TimeoutExpired:
            pytest.skip(f"npm did not install {AGENTS} within {timeout:g} s")
        finally:
            if work:
                shutil.rmtree(work, ignore_errors=True)
    return prefix


def program(prefix: str, name: str) -> str:
    """The program ``name`` (``copilot``, ``codex-acp``, ``opencode``) of the prefix."""
    path = os.path.join(prefix, "node_modules", ".bin", name)
    if not os.access(path, os.X_OK):
        pytest.skip(f"{path} is missing from the installed prefix")
    return path

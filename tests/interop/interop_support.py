"""Helpers for the interop tests: where node and the pinned Effect packages are, and how to
run the TypeScript peers (tests/interop/src) with the ``tsx`` runner pinned in the lock file.

The tests skip only when ``node`` is absent. When node is there but ``node_modules`` is not,
they fail and say how to install it (CI runs ``npm ci`` in this folder first).
"""

from __future__ import annotations

import os
import shutil
from typing import List

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "src")
NODE_MODULES = os.path.join(HERE, "node_modules")
TSX_LOADER = os.path.join(NODE_MODULES, "tsx", "dist", "loader.mjs")
EFFECT_PACKAGE = os.path.join(NODE_MODULES, "effect", "package.json")


def node() -> str:
    """The ``node`` executable; skips the test when there is none (the only reason to skip)."""
    found = shutil.which("node")
    if found is None:
        pytest.skip("node is not installed: the Effect interop tests need Node.js >= 20")
    if not (os.path.exists(TSX_LOADER) and os.path.exists(EFFECT_PACKAGE)):
        pytest.fail(
            f"{NODE_MODULES} is missing: run `(cd tests/interop && npm ci --no-audit --no-fund)` "
            "(.ci/run does this before the tests)",
            pytrace=False,
        )
    return found


def ts_command(script: str) -> List[str]:
    """The argv that runs ``src/<script>`` with node and the pinned tsx loader."""
    return [node(), "--import", "file://" + TSX_LOADER, os.path.join(SRC, script)]

"""Helpers for the interop tests: where node and the pinned Effect packages are, and how to
run the TypeScript peers (tests/interop/src) with the ``tsx`` runner pinned in the lock file.

The tests skip when ``node`` or ``npm`` is absent. The pinned packages are installed by the
tests themselves (tests/prerequisites.py: ``npm ci`` into a cache keyed by the lock file's
digest, linked as ``node_modules``).
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
            f"{NODE_MODULES} is missing or incomplete: remove it and run the tests again "
            "(they install the pinned packages with `npm ci`)",
            pytrace=False,
        )
    return found


def ts_command(script: str) -> List[str]:
    """The argv that runs ``src/<script>`` with node and the pinned tsx loader."""
    return [node(), "--import", "file://" + TSX_LOADER, os.path.join(SRC, script)]

"""Host tools for the ``bridge-client run --tool`` test: ``lookup`` appends to the file named by
``CLI_TOOLS_LOG`` (so the test counts its calls), ``untyped`` has no hints."""
from __future__ import annotations

import os


def lookup(key: str) -> dict:
    """Look a key up.

    Args:
        key: the key.
    """
    with open(os.environ["CLI_TOOLS_LOG"], "a", encoding="utf-8") as f:
        f.write(f"{key} {os.getpid()}\n")
    return {"key": key, "value": 1}


def untyped(key):  # type: ignore[no-untyped-def]
    """No hints."""
    return key

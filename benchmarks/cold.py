"""Issue 15's cold-start rows (being built)."""
from __future__ import annotations

from typing import List, Sequence

from ._common import BenchEnv, Row, Sizes

__all__ = ["many_cold", "wheel_cold_start", "cold_details"]


def many_cold(env: BenchEnv, sizes: Sizes) -> List[Row]:
    raise NotImplementedError("not built yet")


def wheel_cold_start(env: BenchEnv, sizes: Sizes) -> Row:
    raise NotImplementedError("not built yet")


def cold_details(rows: Sequence[Row]) -> List[str]:
    return []

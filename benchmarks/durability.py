"""The cost of the store's fsync level (B03, B10): ``synchronous=FULL`` (the product's choice:
every commit is fsynced before a reader sees its parts) against ``NORMAL`` (no fsync per
commit; a power loss may drop the last commits), side by side on the per-part path.

Two measurements, each alternating FULL and NORMAL on the same disk:

- *one part per commit*: a driver that emits a part and the next only after it was
  committed (the slowest case: every part is its own transaction and, under FULL, its own
  fsync). Reported in microseconds per part.
- *a burst*: parts appended as fast as a driver can, committed by the writer in groups (group
  commit); reported in parts per second.
"""
from __future__ import annotations

import os
import statistics
import tempfile
import threading
import time
from typing import Any, List, Tuple

from bridge_client.bridge.store import Meta, Store, part_text

from ._common import BenchEnv, Figure, Row, Sizes, figure, time_ratio

__all__ = ["durability"]


class _Sink:
    """A turn's committed log, reduced to a count (the store's writer calls it)."""

    def __init__(self) -> None:
        self.count = 0
        self.cond = threading.Condition()

    def publish_segment(self, texts: List[str], metas: List[Meta], marks: List[Meta]) -> None:
        with self.cond:
            self.count += len(texts)
            self.cond.notify_all()


def _store(folder: str, synchronous: str) -> Tuple[Store, Any, _Sink, threading.Lock]:
    path = os.path.join(folder, f"bench-{synchronous}-{time.monotonic_ns()}.sqlite3")
    store = Store(path, synchronous=synchronous)
    sink, lock = _Sink(), threading.Lock()
    return store, store.buffer("t-bench", sink, lock), sink, lock


def _one_per_commit(folder: str, synchronous: str, count: int) -> float:
    """Microseconds per part when each part waits for its own commit."""
    store, buffer, _, lock = _store(folder, synchronous)
    try:
        t0 = time.perf_counter()
        for i in range(count):
            with lock:
                buffer.add(i, part_text("text-delta", i, 0, 1, {"text": "y"}), (0, 1, "text-delta"))
            store.wait(buffer.ticket(i))
        return (time.perf_counter() - t0) / count * 1e6
    finally:
        store.close()


def _burst(folder: str, synchronous: str, count: int) -> float:
    """Parts per second when a driver appends as fast as it can (group commit)."""
    store, buffer, sink, lock = _store(folder, synchronous)
    try:
        t0 = time.perf_counter()
        for i in range(count):
            with lock:
                buffer.add(i, part_text("text-delta", i, 0, 1, {"text": "y"}), (0, 1, "text-delta"))
        store.wait(buffer.ticket(count - 1), None)
        return count / (time.perf_counter() - t0)
    finally:
        store.close()


def durability(env: BenchEnv, sizes: Sizes) -> Row:
    """FULL against NORMAL, on the per-part path of the store (see the module docstring)."""
    single = max(3, sizes.turns)
    burst = max(300, sizes.parts // 4)
    full_us: List[float] = []
    normal_us: List[float] = []
    full_rate: List[float] = []
    normal_rate: List[float] = []
    folder = tempfile.mkdtemp(prefix="durability-", dir=env.workspace("durability"))
    for _ in range(sizes.repeats):
        # Alternating, so that both see the same load on a shared machine.
        full_us.append(_one_per_commit(folder, "FULL", single))
        normal_us.append(_one_per_commit(folder, "NORMAL", single))
        full_rate.append(_burst(folder, "FULL", burst))
        normal_rate.append(_burst(folder, "NORMAL", burst))
    what = f"{single} parts, each its own commit"
    product: Figure = figure(f"store, synchronous=FULL: {what}", "us/part", full_us)
    baseline = figure(f"store, synchronous=NORMAL: {what}", "us/part", normal_us)
    return Row(
        "durability",
        product,
        baseline,
        time_ratio(product, baseline),
        "NORMAL time / FULL time per part (below 1: FULL costs more)",
        "none: the price of keeping what readers saw through a power loss",
        None,
        extra={
            "burst_parts": burst,
            "burst_full_parts_per_s": statistics.median(full_rate),
            "burst_normal_parts_per_s": statistics.median(normal_rate),
            "burst_full_samples": full_rate,
            "burst_normal_samples": normal_rate,
        },
    )

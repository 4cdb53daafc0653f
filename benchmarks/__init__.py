"""Benchmarks of issue 5: how fast the product is, against the limits of its stack, measured
side by side in the same run. Run ``python -m benchmarks`` from the repository root (see
:mod:`benchmarks.__main__` and ``docs/performance.md``). Not part of the test run; the smoke
test (``tests/test_benchmarks_smoke.py``) runs each benchmark once at a tiny size.
"""

NAMES = ("throughput", "replay", "latency", "cold-start", "resume", "recovery", "scale", "durability", "peer")
"""The benchmarks, in the order of issue 5 (``peer`` is the SWE-ReX comparison; ``durability``
is the store's fsync level, FULL against NORMAL, of issue 14)."""

__all__ = ["NAMES"]

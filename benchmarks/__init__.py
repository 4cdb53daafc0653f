"""Benchmarks of issue 5: how fast the product is, against the limits of its stack, measured
side by side in the same run. Run ``python -m benchmarks`` from the repository root (see
:mod:`benchmarks.__main__` and ``docs/performance.md``). Not part of the test run; the smoke
test (``tests/test_benchmarks_smoke.py``) runs each benchmark once at a tiny size.
"""

NAMES = ("throughput", "per-part", "paced", "replay", "latency", "cold-start", "wheel-cold-start",
         "many-cold", "resume", "recovery", "scale", "durability", "peer")
"""The benchmarks, in the order of issue 5 (``peer`` is the SWE-ReX comparison; ``durability``
is the store's fsync level, FULL against NORMAL, of issue 14), with issue 15's rows beside
the ones they refine: ``per-part`` (one ``ctx.text`` per part), ``paced`` (K paced model-like
streams, one row per K), ``wheel-cold-start`` (from a built wheel in a fresh venv) and
``many-cold`` (100 sessions at once on one sandbox and on 100 sandboxes, two rows)."""

__all__ = ["NAMES"]

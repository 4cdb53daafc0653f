"""Benchmarks: how fast the product is, against the limits of its stack, measured side by side
in the same run. Run ``python -m benchmarks`` from the repository root (see
:mod:`benchmarks.__main__` and ``docs/performance.md``). Not part of the test run; the smoke
test (``tests/test_benchmarks_smoke.py``) runs each benchmark once at a tiny size.

The modules here are the rows ``python -m benchmarks`` reports (``product``, ``paced``,
``cold``, ``durability``, ``peer``, ``warm_agents``) and what they share (``_common``); the
other ``_``-prefixed ones are the drivers and child processes the rows start. The stage timers
and profilers, which find where time goes and report no row, are in
:mod:`benchmarks.diagnostics`.
"""

NAMES = ("throughput", "per-part", "paced", "replay", "latency", "cold-start", "wheel-cold-start",
         "many-cold", "resume", "recovery", "scale", "durability", "peer", "warm-agent")
"""The benchmarks, in the order they are reported (``peer`` is the SWE-ReX comparison;
``durability`` is the store's fsync level, FULL against NORMAL), with the rows that refine
one beside it: ``per-part`` (one ``ctx.text`` per part), ``paced`` (K paced model-like
streams, one row per K), ``wheel-cold-start`` (from a built wheel in a fresh venv) and
``many-cold`` (100 sessions at once on one sandbox and on 100 sandboxes, two rows);
``warm-agent`` is a real ACP agent CLI's warm turn against its one-shot run (a row per CLI)."""

__all__ = ["NAMES"]

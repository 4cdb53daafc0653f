"""Diagnostics: tools that find where time or CPU goes, run by hand, not rows of
``python -m benchmarks`` (their stamps and wrappers cost the path they look at).

- ``python -m benchmarks.diagnostics.first_stages``: where a warm turn's first text part waits,
  step by step, in the host and in the bridge.
- ``python -m benchmarks.diagnostics.paced_stages``: where a paced delta waits, step by step,
  and where the bridge's CPU goes per delta; ``--commit-probe``: what one lone commit costs.
- ``python -m benchmarks.diagnostics.many_cold_profile``: where the host's CPU goes when many
  sessions start cold at once.

Each stage timer is one module with two halves: the host's (its ``main``) and the bridge's
(its ``make_driver``, which the bridge loads as its driver and which wraps the bridge's steps).
"""

__all__: "list[str]" = []

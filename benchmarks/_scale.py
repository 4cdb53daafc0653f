"""One scale run in a fresh host process (so its RSS is its own):
``python -m benchmarks._scale WORKSPACE SESSIONS PARTS``.

Starts ``SESSIONS`` sessions of the echo bridge in ``WORKSPACE`` (one bridge for all), each in
its own thread streaming one turn of ``PARTS`` text deltas, all released together at a
barrier. Prints one JSON line: total parts/s, peak host threads and RSS, RSS per session.
"""
from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any, Dict, List

import bridge_client as bc

from ._common import host_rss_bytes, host_threads
from .product import echo_options, session_options


def run(workspace: str, n: int, parts: int) -> Dict[str, Any]:
    """Measure ``n`` concurrent sessions; see the module's docstring."""
    sandbox = bc.LocalSandbox(workspace)
    opts = echo_options({"chunks": parts})
    prompt = "s" * parts
    # Launch (or find) the bridge once, and warm the imports, before the base figures.
    with bc.create_session(opts, session_options(sandbox)) as first:
        sum(1 for _ in first.turn(prompt))
    time.sleep(0.2)  # let the released session's threads end
    base_rss, base_threads = host_rss_bytes(), host_threads()

    counts: List[int] = [0] * n
    errors: List[BaseException] = []
    sessions = [bc.create_session(opts, session_options(sandbox, resend_window=60.0)) for _ in range(n)]
    start = threading.Barrier(n + 1)
    peak = {"rss": base_rss, "threads": base_threads}
    done = threading.Event()

    def work(i: int) -> None:
        try:
            sessions[i]._connect()
            start.wait()
            counts[i] = sum(1 for _ in sessions[i].turn(prompt))
        except BaseException as exc:  # reported below
            errors.append(exc)
            start.abort()

    def sample() -> None:
        while not done.wait(0.05):
            peak["rss"] = max(peak["rss"], host_rss_bytes())
            peak["threads"] = max(peak["threads"], host_threads())

    workers = [threading.Thread(target=work, args=(i,), name=f"scale-{i}") for i in range(n)]
    sampler = threading.Thread(target=sample, name="scale-sampler")
    for t in workers:
        t.start()
    sampler.start()
    start.wait()
    t0 = time.perf_counter()
    for t in workers:
        t.join()
    elapsed = time.perf_counter() - t0
    connected_rss, connected_threads = host_rss_bytes(), host_threads()
    done.set()
    sampler.join()
    for s in sessions:
        s.release()
    if errors:
        raise errors[0]
    peak_rss = max(peak["rss"], connected_rss)
    return {
        "sessions": n,
        "parts_each": parts,
        "total_parts": sum(counts),
        "seconds": elapsed,
        "parts_per_s": sum(counts) / elapsed,
        "host_threads_base": base_threads,
        "host_threads_peak": max(peak["threads"], connected_threads),
        # Each session also has one worker thread of this benchmark; not the product's.
        "product_threads_per_session": (max(peak["threads"], connected_threads) - base_threads - n) / n,
        "host_rss_base_bytes": base_rss,
        "host_rss_peak_bytes": peak_rss,
        "rss_per_session_bytes": (peak_rss - base_rss) / n,
    }


def main(argv: List[str]) -> int:
    print(json.dumps(run(argv[0], int(argv[1]), int(argv[2]))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

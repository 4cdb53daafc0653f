"""The paced rows' measurement: the CPU of the measured process is read from
a sampler process of its own, ended threads included, and a window whose premise breaks is
marked or fails the row instead of reporting nonsense. Nothing here is timed."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import paced  # noqa: E402
from benchmarks._paced_sampler import snapshot  # noqa: E402

pytestmark = pytest.mark.timeout(60)

# A child that, told to on stdin, burns CPU in a thread of its own, ends that thread and says so.
BURNER = """
import sys, threading, time
def burn():
    end = time.process_time() + 0.3
    while time.process_time() < end:
        pass
print("ready", flush=True)
sys.stdin.readline()
t = threading.Thread(target=burn); t.start(); t.join()
print("done", flush=True)
sys.stdin.readline()
"""


@pytest.fixture
def burner():
    child = subprocess.Popen([sys.executable, "-c", BURNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        yield child
    finally:
        child.kill()
        child.wait()


def _go(child: subprocess.Popen, expect: str) -> None:
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write("\n")
    child.stdin.flush()
    assert child.stdout.readline() == expect + "\n"


def test_the_cpu_of_a_thread_that_ended_still_counts(burner):
    before = snapshot([burner.pid])["procs"][str(burner.pid)]
    _go(burner, "done")
    deadline = time.monotonic() + 5.0
    while True:  # joined in Python; the kernel lets the thread go a moment later
        after = snapshot([burner.pid])["procs"][str(burner.pid)]
        if set(after["threads"]) == set(before["threads"]) or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    # The burning thread has ended: a sum over live threads would have lost its 0.3 s.
    assert set(after["threads"]) == set(before["threads"])
    assert after["cpu"] - before["cpu"] >= 0.25
    assert after["start"] == before["start"]


def _snap(t_s: float, start: int = 7, cpu: float = 1.0, threads=None, host_cpu: float = 1.0):
    t = int(t_s * 1e9)
    procs = {"10": {"start": start, "cpu": cpu, "ticks": cpu, "threads": threads or {"10": 5, "11": 5},
                    "t_end": t + 1000},
             "20": {"start": 3, "cpu": host_cpu, "ticks": host_cpu, "threads": {"20": 1}, "t_end": t + 2000}}
    return {"due": t_s, "t": t, "t_cpu": t + 10, "t_end": t + 2000, "procs": procs}


def test_a_window_counts_the_deltas_yielded_in_it_and_says_what_it_cannot_measure():
    yields = [int(x * 1e9) for x in (0.99, 1.0, 1.2, 1.5, 1.99, 2.0)]
    a = _snap(1.0)
    b = _snap(2.0, cpu=1.004, threads={"10": 9, "11": 13, "12": 2}, host_cpu=1.002)
    w = paced._window(a, b, 10, 20, yields, 1.0)
    assert w["deltas"] == 4 and w["valid_cpu"]
    assert w["other_cpu_us"] == pytest.approx(1000.0) and w["host_cpu_us"] == pytest.approx(500.0)
    assert w["other_vcsw"] == pytest.approx((4 + 8 + 2) / 4)
    # A thread that ended takes its switches with it: the figure is marked, not made up.
    ended = paced._window(a, _snap(2.0, cpu=1.004, threads={"10": 9}), 10, 20, yields, 1.0)
    assert ended["other_vcsw"] is None and "1 measured threads ended" in ended["invalid_because"]
    assert ended["other_cpu_us"] == pytest.approx(1000.0)  # the process clock still counts it
    # No delta, or a window far shorter than it should be: no CPU figure at all.
    empty = paced._window(a, _snap(2.0, cpu=1.004), 10, 20, [], 1.0)
    assert not empty["valid_cpu"] and empty["other_cpu_us"] is None and "no delta" in empty["invalid_because"]
    short = paced._window(a, _snap(1.2, cpu=1.004), 10, 20, yields, 1.0)
    assert not short["valid_cpu"] and "window 0.200 s" in short["invalid_because"]
    # Another process behind the same pid: the row fails.
    with pytest.raises(RuntimeError, match="pid was reused"):
        paced._window(a, _snap(2.0, start=8, cpu=0.5), 10, 20, yields, 1.0)


def test_run_streams_measures_from_its_own_process_and_fails_loudly_without_deltas(burner):
    def stream(i: int):
        pairs = []
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            e = time.monotonic_ns()
            time.sleep(0.002)
            pairs.append((e, time.monotonic_ns()))
        return pairs

    windows, lat, steady, lags = paced._run_streams(2, 0.5, burner.pid, stream)
    assert len(windows) == paced.SUB_WINDOWS and all(w["valid_cpu"] for w in windows)
    assert all(w["deltas"] > 0 and w["other_cpu_us"] >= 0 and w["host_cpu_us"] > 0 for w in windows)
    assert lat and steady and all(ms >= 2.0 for ms in lat) and len(lags) == 2
    with pytest.raises(RuntimeError, match="0 of 5 windows valid: no delta"):
        paced._run_streams(2, 0.3, burner.pid, lambda i: [])

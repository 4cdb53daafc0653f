"""What every benchmark shares: sizes, results, statistics, the bench environment, process facts.

Nothing here measures anything by itself. A benchmark returns :class:`Row` values; the runner
(:mod:`benchmarks.__main__`) prints them as a table and writes them as JSON.
"""
from __future__ import annotations

import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

__all__ = [
    "Sizes",
    "Figure",
    "Row",
    "figure",
    "BenchEnv",
    "host_rss_bytes",
    "host_threads",
    "machine",
    "percentile",
    "kill_pids_under",
]


@dataclass(frozen=True)
class Sizes:
    """How big and how often each benchmark runs.

    Attributes:
        repeats: runs of each throughput-like measurement (the median is reported).
        parts: text deltas in the throughput turn (aim: >= 2 s of streaming).
        replay_parts: parts of the finished turn read back from offset 0.
        turns: warm turns for first-part latency (p50, p99).
        cold_runs: cold starts (bridge launched each time).
        resumes: connection drops in the resume benchmark.
        recoveries: SIGKILLs of the bridge in the recovery benchmark.
        sessions: session counts of the scale benchmark.
        scale_parts: text deltas each session streams in the scale benchmark.
        commands: commands run by each side of the peer comparison.
        paced_streams: stream counts K of the paced rows (one row each).
        paced_deltas: deltas of one paced stream at K=1 (fewer per stream at larger K, see
            :func:`benchmarks.paced.stream_deltas`).
        paced_rate: deltas per second of each paced stream.
        paced_normal: the paced rows also run the bridge with ``--synchronous NORMAL`` (in the
            same run, after FULL and the baseline; detail line only, the row stays FULL's).
        many_sessions: sessions created at once in the many-cold rows.
        many_runs: runs of each many-cold row (the spread is over them).
        many_one_only: run only the many-cold row on one sandbox (not the one that starts
            ``many_sessions`` bridges, which loads a shared machine for seconds).
        wheel_runs: cold starts of each kind in the wheel cold-start row.
    """

    repeats: int = 3
    parts: int = 200_000
    replay_parts: int = 100_000
    turns: int = 300
    cold_runs: int = 10
    resumes: int = 20
    recoveries: int = 5
    sessions: Sequence[int] = (50, 100, 200)
    scale_parts: int = 2_000
    commands: int = 50
    paced_streams: Sequence[int] = (1, 10, 50)
    paced_deltas: int = 5_000
    paced_rate: int = 200
    paced_normal: bool = False
    many_sessions: int = 100
    many_runs: int = 3
    many_one_only: bool = False
    wheel_runs: int = 5

    @classmethod
    def quick(cls) -> "Sizes":
        """About a tenth of the full run: for a look, not for the record."""
        return cls(
            repeats=1,
            parts=40_000,
            replay_parts=20_000,
            turns=60,
            cold_runs=3,
            resumes=5,
            recoveries=2,
            sessions=(50, 100, 200),
            scale_parts=300,
            commands=15,
            paced_deltas=1_000,
            many_sessions=25,
            many_runs=3,
            wheel_runs=2,
        )

    @classmethod
    def tiny(cls) -> "Sizes":
        """Each benchmark once at a tiny size (the smoke test): proves it runs, measures nothing."""
        return cls(
            repeats=1,
            parts=300,
            replay_parts=300,
            turns=3,
            cold_runs=1,
            resumes=1,
            recoveries=1,
            sessions=(2,),
            scale_parts=20,
            commands=2,
            paced_streams=(1, 3),
            paced_deltas=100,  # 0.5 s: windows of 70 ms, which a sampler on a busy machine can keep
            many_sessions=3,
            many_runs=1,
            wheel_runs=1,
        )


@dataclass
class Figure:
    """Samples of one quantity and their summary.

    Attributes:
        what: what was measured (one line). unit: e.g. ``parts/s``, ``ms``, ``MiB``.
        samples: every sample, in the unit. median, low, high: the median and the spread
            (min and max, or p50/p99 for latencies, see ``spread``).
        spread: how ``low``/``high`` were taken (``"min-max"`` or ``"p1-p99"``...).
    """

    what: str
    unit: str
    samples: List[float]
    median: float
    low: float
    high: float
    spread: str = "min-max"


def percentile(samples: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``samples`` by linear interpolation."""
    if not samples:
        raise ValueError("no samples")
    if len(samples) == 1:
        return float(samples[0])
    ordered = sorted(samples)
    k = (len(ordered) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return float(ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo))


def figure(what: str, unit: str, samples: Sequence[float], spread: str = "min-max") -> Figure:
    """Summarise ``samples``: the median and the spread (``min-max`` or ``p1-p99``)."""
    values = [float(s) for s in samples]
    if spread == "min-max":
        low, high = min(values), max(values)
    elif spread == "p1-p99":
        low, high = percentile(values, 1), percentile(values, 99)
    else:
        raise ValueError(f"unknown spread {spread!r}")
    return Figure(what, unit, values, float(statistics.median(values)), low, high, spread)


@dataclass
class Row:
    """One line of the table: the product's figure, its baseline from the same run, the ratio.

    Attributes:
        name: the benchmark (``throughput``, ``replay``...).
        product: the product's figure (``None`` when skipped).
        baseline: the baseline's figure (``None`` when the benchmark has none).
        ratio: product median / baseline median (for rates) or the inverse (for times), so
            that a ratio above 1 always means "the product is faster"; ``None`` without one.
        ratio_means: a few words on what the ratio says.
        target: the first target of issue 5, in words. met: whether it is met (``None``: no
            target, or skipped).
        skipped: ``"skipped: reason"`` when the benchmark could not run.
        extra: more figures (thread counts, p99, per-size results).
    """

    name: str
    product: Optional[Figure]
    baseline: Optional[Figure] = None
    ratio: Optional[float] = None
    ratio_means: str = ""
    target: str = ""
    met: Optional[bool] = None
    skipped: Optional[str] = None
    extra: Dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> Dict[str, Any]:
        """The row as plain JSON."""
        return asdict(self)


def rate_ratio(product: Figure, baseline: Figure) -> float:
    """product/baseline for rates (higher is better)."""
    return product.median / baseline.median if baseline.median else float("nan")


def time_ratio(product: Figure, baseline: Figure) -> float:
    """baseline/product for times (so > 1 means the product is faster)."""
    return baseline.median / product.median if product.median else float("nan")


# ----------------------------------------------------------------------------- process facts


def _status_field(name: str, pid: Optional[int] = None) -> int:
    path = f"/proc/{pid or 'self'}/status"
    with open(path) as f:
        for line in f:
            if line.startswith(name + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{name} not in {path}")


def host_rss_bytes(pid: Optional[int] = None) -> int:
    """Resident set size of this process (or ``pid``), in bytes (Linux ``/proc``)."""
    return _status_field("VmRSS", pid) * 1024


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds ``pid`` has used so far, all its threads (Linux ``/proc``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def host_threads(pid: Optional[int] = None) -> int:
    """Threads of this process (or ``pid``), as the kernel counts them."""
    return _status_field("Threads", pid)


def machine() -> Dict[str, Any]:
    """The machine the run happened on: CPU model, cores, Python, OS, key library versions."""
    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    versions: Dict[str, str] = {}
    for dist in ("websockets", "websocket-client", "swe-rex"):
        try:
            from importlib.metadata import version

            versions[dist] = version(dist)
        except Exception:
            versions[dist] = "not installed"
    try:
        load = os.getloadavg()
    except OSError:
        load = (float("nan"),) * 3
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "os": f"{platform.system()} {platform.release()} ({_os_name()})",
        "load_average_at_start": [round(x, 2) for x in load],
        "libraries": versions,
    }


def _os_name() -> str:
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return platform.platform()


def _pids_under(folder: str) -> List[int]:
    found = []
    prefix = os.path.realpath(folder)
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        if cwd == prefix or cwd.startswith(prefix + os.sep):
            found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_pids_under(folder: str, grace: float = 3.0) -> None:
    """SIGTERM every process working inside ``folder`` (bridges run in their workspace), then
    SIGKILL what is left after ``grace`` seconds. By pid, never by name."""
    pids = _pids_under(folder)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if _alive(p)]
        time.sleep(0.02)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def wait_gone(pid: int, timeout: float = 10.0) -> bool:
    """Wait until ``pid`` has exited (or is a zombie); True when it did within ``timeout``."""
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


# ----------------------------------------------------------------------------- environment


class BenchEnv:
    """A private world for one run: ``BRIDGE_CLIENT_HOME`` and ``BRIDGE_CLIENT_SECRET`` set
    to a temporary folder and a fixed secret, fresh workspaces on demand, and every bridge
    started in them stopped at the end (by pid).

    Use as a context manager; the environment variables are restored on exit.
    """

    SECRET = "benchmark-secret-not-for-production"

    def __init__(self, root: Optional[str] = None) -> None:
        self._own_root = root is None
        self.root = root or tempfile.mkdtemp(prefix="bridge-client-bench-")
        self._saved: Dict[str, Optional[str]] = {}
        self._workspaces: List[str] = []
        self._count = 0

    def __enter__(self) -> "BenchEnv":
        home = os.path.join(self.root, "home")
        os.makedirs(home, exist_ok=True)
        for key, value in (("BRIDGE_CLIENT_HOME", home), ("BRIDGE_CLIENT_SECRET", self.SECRET)):
            self._saved[key] = os.environ.get(key)
            os.environ[key] = value
        return self

    def __exit__(self, *exc: Any) -> None:
        for folder in self._workspaces:
            kill_pids_under(folder)
        for key, value in self._saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def workspace(self, label: str) -> str:
        """A new empty folder for a sandbox (each gets its own bridges)."""
        self._count += 1
        folder = os.path.join(self.root, f"ws-{self._count:03d}-{label}")
        os.makedirs(folder)
        self._workspaces.append(folder)
        return folder

    def stop_bridges(self, folder: str) -> None:
        """Stop every bridge working in ``folder`` now."""
        kill_pids_under(folder)


def python_subprocess(args: Sequence[str], **kw: Any) -> "subprocess.Popen[str]":
    """Start ``python args...`` with this interpreter, the repo root importable, text pipes."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.Popen(
        [sys.executable, *args], stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True, env=env, **kw
    )


def timed(fn: Callable[[], Any]) -> float:
    """Seconds ``fn()`` took (``perf_counter``)."""
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def chunks_of(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    """``items`` cut in pieces of ``size`` (the last may be shorter)."""
    for i in range(0, len(items), size):
        yield items[i : i + size]

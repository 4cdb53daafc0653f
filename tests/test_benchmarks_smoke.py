"""Smoke test of ``python -m benchmarks`` (issue 5): every benchmark runs once at a tiny size
and reports a figure. Nothing here is timed: speed belongs to the benchmarks themselves."""
from __future__ import annotations

import dataclasses
import json
import math
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import NAMES  # noqa: E402
from benchmarks.__main__ import details, main, run, sizes_from, parse_args, table  # noqa: E402
from benchmarks._common import Sizes, figure  # noqa: E402

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def _no_host_secret(monkeypatch):
    # The benchmarks make their own private home and secret; nothing of the user's is used.
    monkeypatch.delenv("BRIDGE_CLIENT_HOME", raising=False)
    monkeypatch.delenv("BRIDGE_CLIENT_SECRET", raising=False)


MULTI_ROW = {
    "paced": ["paced K=1", "paced K=3"],
    "many-cold": ["many-cold, one sandbox", "many-cold, many sandboxes"],
}


APART = ("wheel-cold-start", "warm-agent")  # tested on their own


@pytest.mark.parametrize("name", [n for n in NAMES if n not in MULTI_ROW and n not in APART])
def test_each_benchmark_runs_once_at_a_tiny_size(name):
    (row,) = run([name], Sizes.tiny(), log=lambda _: None)
    assert not (row.skipped or "").startswith("failed:"), row.skipped
    assert row.product is not None and row.product.samples
    assert all(math.isfinite(s) and s > 0 for s in row.product.samples)
    if name == "peer" and row.skipped:
        assert row.skipped.startswith("skipped: ")  # swe-rex is an optional extra
    elif name not in ("recovery", "scale"):  # these two take their baselines from other rows
        assert row.baseline is not None and row.baseline.median > 0
        assert row.ratio is not None and row.ratio > 0
    if name == "scale":
        (result,) = row.extra["by_sessions"]
        assert result["sessions"] == 2 and result["total_parts"] == 2 * (20 + 7)
        assert result["host_threads_peak"] > result["host_threads_base"]
    assert name in table([row]) or row.name in table([row])


def test_the_warm_agent_rows_run_each_cached_cli_or_say_it_is_not_cached():
    rows = run(["warm-agent"], Sizes.tiny(), log=lambda _: None)
    drivers = ["claude-code", "qwen", "pi", "opencode", "copilot"]
    assert [r.name for r in rows] == [f"warm-agent {d}" for d in drivers]
    for row in rows:
        if row.skipped:
            assert row.skipped.startswith("skipped: ") and "cache" in row.skipped, row.skipped
            continue
        assert row.product is not None and row.baseline is not None, row
        assert row.product.median > 0 and row.baseline.median > 0 and row.ratio is not None
        assert row.extra["first_turn_ms"] > 0


def test_main_writes_the_json_and_prints_the_table(tmp_path, capsys):
    out = tmp_path / "results" / "r.json"
    assert main(["--tiny", "--only", "latency", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["machine"]["cores"] >= 1 and data["sizes"]["turns"] == Sizes.tiny().turns
    assert [r["name"] for r in data["rows"]] == ["latency"]
    printed = capsys.readouterr().out
    assert "| latency |" in printed and "round trip" in printed
    assert not list(out.parent.glob("*.tmp")), "no half-written file left behind"


def test_a_failing_benchmark_is_a_row_and_the_others_still_run(monkeypatch):
    from benchmarks import product

    def broken(env, sizes):
        raise RuntimeError("no bridge today")

    monkeypatch.setattr(product, "latency", broken)
    rows = run(["latency", "resume"], Sizes.tiny(), log=lambda _: None)
    assert rows[0].product is None and rows[0].skipped == "failed: RuntimeError: no bridge today"
    assert rows[1].product is not None and rows[1].product.median > 0
    assert "failed: RuntimeError: no bridge today" in table(rows)


def test_sizes_and_bad_arguments():
    args = parse_args(["--quick", "--sessions", "5,10", "--parts", "1000"])
    sizes = sizes_from(args)
    assert sizes.sessions == (5, 10) and sizes.parts == 1000 and sizes.repeats == Sizes.quick().repeats
    paced_args = ["--paced-streams", "1,25", "--paced-deltas", "300", "--many-sessions", "7"]
    sizes = sizes_from(parse_args(paced_args))
    assert sizes.paced_streams == (1, 25) and sizes.paced_deltas == 300 and sizes.many_sessions == 7
    assert not sizes.many_one_only and sizes_from(parse_args(["--many-one-only"])).many_one_only
    for bad in (["--sessions", "0"], ["--parts", "x"], ["--only", "nope"], ["--quick", "--tiny"],
                ["--paced-streams", "0"], ["--many-runs", "0"]):
        with pytest.raises(SystemExit):
            parse_args(bad)


def test_figure_median_and_spreads():
    f = figure("x", "ms", [3.0, 1.0, 2.0])
    assert (f.median, f.low, f.high) == (2.0, 1.0, 3.0)
    p = figure("x", "ms", list(range(1, 102)), "p1-p99")
    assert p.median == 51 and p.low == pytest.approx(2.0) and p.high == pytest.approx(100.0)


def test_paced_rows_measure_both_sides_per_delta():
    rows = run(["paced"], Sizes.tiny(), log=lambda _: None)
    assert [r.name for r in rows] == MULTI_ROW["paced"], [r.skipped for r in rows]
    for row in rows:
        k = row.extra["streams"]
        assert row.product is not None and row.baseline is not None and row.ratio and row.ratio > 0
        # a window the sampler could not measure is left out (at least 3 of 5 or the row fails)
        assert 3 <= len(row.product.samples) <= 5 and all(s > 0 for s in row.product.samples)
        for side in ("product", "baseline"):
            figures = row.extra[side]
            assert figures["deltas_measured"] > 0 and figures["windows_valid"] >= 3
            assert figures["host_cpu_us_per_delta"] > 0
            # nan: every window's thread reads were too slow for windows this short (marked)
            assert figures["vcsw_per_delta"] > 0 or math.isnan(figures["vcsw_per_delta"])
            assert 0 < figures["p50_ms"] <= figures["p99_ms"]
        assert row.extra["deltas_per_stream"] == Sizes.tiny().paced_deltas and k in (1, 3)
    assert "emit-to-yield p50" in details(rows)


def test_per_part_row_reports_host_cpu_per_part():
    (row,) = run(["per-part"], Sizes.tiny(), log=lambda _: None)
    # the bridge side counts clock ticks (10 ms): at this size it may well be 0
    assert row.extra["host_cpu_us_per_part"] > 0 and row.extra["bridge_cpu_us_per_part"] >= 0
    assert "per-part / transport limit" in details([row])


def test_many_cold_rows_count_what_the_host_started():
    n = Sizes.tiny().many_sessions
    rows = run(["many-cold"], Sizes.tiny(), log=lambda _: None)
    assert [r.name for r in rows] == MULTI_ROW["many-cold"], [r.skipped for r in rows]
    one, many = rows
    for row in rows:
        assert row.product is not None and row.baseline is not None and row.ratio and row.ratio > 0
        (run_,) = row.extra["runs"]
        assert run_["sessions"] == n and len(run_["first_part_s"]) == n
        assert all(s > 0 for s in run_["first_part_s"])
        assert row.extra["lone_spawned"] == [1]  # a lone cold start spawns its bridge
    # Whoever spawns how many, exactly one bridge per sandbox wins its lock and serves (C05).
    assert one.extra["bridges_logged"][0]["won_lock"] == 1
    assert 1 <= one.extra["spawned"][0] <= n
    assert one.extra["bridges_logged"][0]["won_lock"] + one.extra["bridges_logged"][0]["lost_lock"] == (
        one.extra["spawned"][0])
    assert many.extra["spawned"] == [n] and many.extra["bridges_logged"][0]["won_lock"] == n
    assert "bridges spawned" in details(rows)


def test_many_cold_one_only_runs_the_one_sandbox_row_alone():
    sizes = dataclasses.replace(Sizes.tiny(), many_one_only=True)
    rows = run(["many-cold"], sizes, log=lambda _: None)
    assert [r.name for r in rows] == MULTI_ROW["many-cold"][:1], [r.skipped for r in rows]
    assert rows[0].extra["spawned"] == [1] and rows[0].ratio and rows[0].ratio > 0


def test_wheel_cold_start_runs_from_the_venv_not_the_source_tree():
    (row,) = run(["wheel-cold-start"], Sizes.tiny(), log=lambda _: None)
    assert row.product is not None and row.baseline is not None, row.skipped
    venv_module = row.extra["venv_module"]
    assert "site-packages" in venv_module and not venv_module.startswith(os.path.join(ROOT, "bridge_client"))
    assert row.extra["own_install_cold_start_median_ms"] > 0


def test_paced_stages_stamps_every_delta_at_every_step():
    # In a child process: the tool wraps the host's reader and streams in the process it runs in.
    import subprocess

    env = {k: v for k, v in os.environ.items() if k not in ("BRIDGE_CLIENT_HOME", "BRIDGE_CLIENT_SECRET")}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.diagnostics.paced_stages", "--streams", "2", "--deltas", "100"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=100,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    # 2 streams x the steady 71 of 100 deltas, each stamped at every step
    assert "142 deltas of the steady part" in out, out
    for step in ("emit -> round_start", "publish -> take", "sent -> recv", "took -> yield",
                 "bridge (emit -> sent)", "host (sent -> yield)", "commit rounds", "deltas per Chunk",
                 "bridge CPU per part published", "turn threads", "connection threads (frames, Acks)",
                 "each ctx.text: CPU", "CPU per round: the transaction", "each Chunk's send"):
        assert step in out, (step, out)


def test_paced_stages_commit_probe_measures_a_lone_commit_at_both_levels():
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.diagnostics.paced_stages", "--commit-probe", "--deltas", "10",
         "--rate", "1000"],
        cwd=ROOT, capture_output=True, text=True, timeout=100,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line.split() for line in done.stdout.splitlines() if line.startswith("  ")]
    assert [(w[0], w[1]) for w in lines] == [("FULL", "paced"), ("FULL", "back"), ("NORMAL", "paced"),
                                            ("NORMAL", "back")], done.stdout
    # FULL's fsync waits: the committing thread sleeps on the disk at least once per commit
    assert float(lines[0][lines[0].index("switches") + 1]) >= 1.0, done.stdout


def test_first_stages_stamps_every_step_of_a_warm_turn_start():
    # The bridge's half wraps the connection thread's frame reading and the connection's sends:
    # a rename in either left a stage unstamped (or the tool failing) without a word.
    import subprocess

    env = {k: v for k, v in os.environ.items() if k not in ("BRIDGE_CLIENT_HOME", "BRIDGE_CLIENT_SECRET")}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.diagnostics.first_stages", "--turns", "5"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=100,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {line.split()[0] for line in done.stdout.splitlines()[2:] if line.strip()}
    for step in ("sock", "frame", "start", "run", "commit0", "commit1", "send0", "send1", "first", "total"):
        assert step in rows, (step, done.stdout)


def test_latency_row_reports_the_storage_floor_and_normal():
    sizes = dataclasses.replace(Sizes.tiny(), paced_normal=True)
    (row,) = run(["latency"], sizes, log=lambda _: None)
    assert row.skipped is None
    extra = row.extra
    assert 0 < extra["commit_floor_ms"] < extra["floor_ms"]
    assert extra["floor_ms"] == row.baseline.median + extra["commit_floor_ms"]
    assert extra["normal_p50_ms"] > 0 and extra["normal_p99_ms"] >= extra["normal_p50_ms"]

"""The ``openai`` driver's workspace tools on real files and real processes: bad calls come
back as error results (never exceptions), paths stay in the workspace, commands are waited
for, timed out and cancelled by process group, writes are never half-done."""

from __future__ import annotations

import os
import threading

from bridge_client.drivers.tools import TOOL_NAMES, TOOL_SPECS, run_tool


def _run(root, name, args, cancelled=None, timeout=10.0):
    return run_tool(name, args, str(root), cancelled or threading.Event(), timeout, 1000)


def test_tool_specs_are_function_tools_named_as_run():
    assert TOOL_NAMES == ("run_command", "read_file", "write_file", "list_dir")
    assert all(
        spec["type"] == "function" and spec["function"]["parameters"]["type"] == "object"
        for spec in TOOL_SPECS
    )


def test_run_command_waits_for_a_command_that_closed_its_output(tmp_path):
    out, is_error = _run(tmp_path, "run_command", {"command": "exec >/dev/null 2>&1; sleep 0.3; touch done"})
    assert not is_error and out["exitCode"] == 0
    assert (tmp_path / "done").exists(), "the command was not killed when its output closed"


def test_run_command_times_out_and_reports_failures(tmp_path):
    out, is_error = _run(tmp_path, "run_command", {"command": "echo start; sleep 30", "timeout": 0.3})
    assert is_error and out["timedOut"] and out["output"] == "start\n"
    out, is_error = _run(tmp_path, "run_command", {"command": "echo oops >&2; exit 3"})
    assert is_error and out == {"exitCode": 3, "output": "oops\n", "timedOut": False, "cancelled": False}


def test_run_command_cancel_kills_the_group(tmp_path):
    cancelled = threading.Event()
    threading.Timer(0.2, cancelled.set).start()
    out, is_error = _run(tmp_path, "run_command", {"command": "sleep 30 & sleep 30"}, cancelled)
    assert is_error and out["cancelled"]


def test_output_is_cut_and_says_so(tmp_path):
    out, _ = _run(tmp_path, "run_command", {"command": "yes x | head -c 5000"})
    assert out["output"].startswith("x\nx\n") and "more characters cut" in out["output"]


def test_files_stay_in_the_workspace(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("secret")
    root = tmp_path / "ws"
    root.mkdir()
    os.symlink(outside, root / "link")
    for name, args in [
        ("read_file", {"path": "../outside.txt"}),
        ("read_file", {"path": str(outside)}),
        ("read_file", {"path": "link"}),
        ("write_file", {"path": "../x.txt", "content": "x"}),
        ("list_dir", {"path": ".."}),
    ]:
        out, is_error = _run(root, name, args)
        assert is_error and "outside the workspace" in out, (name, args, out)
    assert not (tmp_path / "x.txt").exists()


def test_write_read_and_list(tmp_path):
    assert _run(tmp_path, "write_file", {"path": "a/b.txt", "content": "héllo"}) == (
        {"path": "a/b.txt", "bytes": 6},
        False,
    )
    assert _run(tmp_path, "read_file", {"path": "a/b.txt"}) == ("héllo", False)
    assert _run(tmp_path, "list_dir", {}) == ("a/", False)


def test_a_failed_write_leaves_no_temporary_file(tmp_path):
    (tmp_path / "adir").mkdir()
    out, is_error = _run(tmp_path, "write_file", {"path": "adir", "content": "x"})
    assert is_error and "Error" in out
    assert sorted(os.listdir(tmp_path)) == ["adir"]


def test_bad_calls_are_error_results(tmp_path):
    assert _run(tmp_path, "rm_rf", {})[1] is True
    assert _run(tmp_path, "run_command", ["ls"]) == ("arguments must be a JSON object", True)
    assert _run(tmp_path, "run_command", {"command": ""})[1] is True
    assert _run(tmp_path, "read_file", {"path": "missing.txt"})[1] is True
    assert _run(tmp_path, "write_file", {"path": "x", "content": 3}) == ("content must be a string", True)

"""The stderr tail of a CLI that exited holds what it wrote just before it left.

The reader thread reads stderr as the scheduler lets it; a CLI that writes and exits at
once can be reaped before that thread has read its last line, and an error message built
then lost the CLI's last words (the ACP driver's "exited (status 3)" without the reason,
seen in a CI run under load). The tests make the reader late on purpose.
"""

import sys
import time

from bridge_client.drivers.cli_process import JsonLinesProcess

_SAY_AND_EXIT = "import os, sys; sys.stderr.write('the last words\\n'); sys.stderr.flush(); os._exit(3)"


def _late_reader(monkeypatch, delay):
    read = JsonLinesProcess._read_stderr

    def late(self, stream):
        time.sleep(delay)
        read(self, stream)

    monkeypatch.setattr(JsonLinesProcess, "_read_stderr", late)


def test_stderr_tail_after_exit_waits_for_the_reader(tmp_path, monkeypatch):
    _late_reader(monkeypatch, 0.2)
    proc = JsonLinesProcess([sys.executable, "-c", _SAY_AND_EXIT], cwd=str(tmp_path))
    try:
        assert proc.wait(10.0) == 3
        assert proc.stderr_tail() == "the last words"
    finally:
        proc.stop(grace=1.0)


def test_stderr_tail_of_a_running_cli_does_not_wait(tmp_path, monkeypatch):
    _late_reader(monkeypatch, 0.2)
    proc = JsonLinesProcess([sys.executable, "-c", "import time; time.sleep(30)"], cwd=str(tmp_path))
    try:
        started = time.monotonic()
        assert proc.stderr_tail() == ""
        assert time.monotonic() - started < 0.4  # waiting would take the whole 0.5 s join
    finally:
        proc.stop(grace=1.0)

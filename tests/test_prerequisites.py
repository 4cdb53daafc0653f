"""The tests' own set-up (tests/prerequisites.py): an engine that already answers is used and
never stopped; the interop packages are linked from the cache keyed by the lock file."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

import pytest

import prerequisites


def test_an_engine_that_answers_is_reused_and_not_stopped(docker_engine):
    if docker_engine.client is None:
        pytest.skip(docker_engine.reason)
    again = prerequisites.DockerEngine().start()
    try:
        assert again.client is not None and again.started is None  # found, not started
    finally:
        again.stop()
    assert docker_engine.client.ping()  # stop() of a found engine leaves it running


def test_interop_packages_are_linked_from_the_cache_of_their_lock_file():
    path = prerequisites.interop_node_modules(pytest.skip)
    assert os.path.isfile(os.path.join(path, "effect", "package.json"))
    if os.path.islink(path):
        lock = os.path.join(prerequisites.INTEROP, "package-lock.json")
        digest = prerequisites._digest(lock)
        assert os.path.realpath(path) == os.path.realpath(
            prerequisites.cache_dir("npm", f"interop-{digest}", "node_modules")
        )


def _default_sigterm() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def test_a_test_dockerd_is_stopped_by_the_last_run_that_uses_it(tmp_path, monkeypatch):
    # Two suite runs share the dockerd one of them started: the first to end leaves it to the
    # other, the last stops it by the pid the starter wrote. A stand-in process named
    # "dockerd" (a copy of sleep) is what gets stopped, by pid.
    monkeypatch.setattr(prerequisites, "cache_dir", lambda *parts: os.path.join(str(tmp_path), *parts))
    fake = tmp_path / "bin" / "dockerd"
    fake.parent.mkdir()
    shutil.copy(shutil.which("sleep"), fake)
    # SIGTERM as the stand-in's own default (a runner may pass it on ignored or blocked): the
    # stop is then one SIGTERM, not the STOP_WAIT and a SIGKILL.
    proc = subprocess.Popen([str(fake), "60"], preexec_fn=_default_sigterm)
    try:
        (tmp_path / prerequisites._STARTED).write_text(str(proc.pid))
        first, last = prerequisites.DockerEngine(), prerequisites.DockerEngine()
        first._join()
        last._join()
        first.stop()
        assert proc.poll() is None, "the first run to end stopped a dockerd another run uses"
        started = time.monotonic()
        last.stop()
        took = time.monotonic() - started
        assert proc.poll() is not None, f"the last run to end left the dockerd running ({took:.1f} s)"
        assert took < prerequisites.STOP_WAIT, f"the stop waited {took:.1f} s: SIGTERM did not end it"
        assert not (tmp_path / prerequisites._STARTED).exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

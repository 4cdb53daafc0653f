"""The tests' own set-up (tests/prerequisites.py): an engine that already answers is used and
never stopped; the interop packages are linked from the cache keyed by the lock file."""
from __future__ import annotations

import os

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

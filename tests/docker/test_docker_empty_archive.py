"""``DockerSandbox.read_file`` of an archive with no member (the engine's answer for a file
that went away while it was read, and what Python 3.9/3.10's tarfile fails on with
``ValueError: negative seek value -1``) is ``FileNotFoundError``, on every Python."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.timeout(120)


def test_read_file_of_an_empty_archive_is_file_not_found_an_empty_file_empty(make_container, monkeypatch):
    sandbox = make_container()  # one container for every case: each costs a start
    sandbox.write_file("/tmp/empty", b"")
    assert sandbox.read_file("/tmp/empty") == b""  # a real empty file is not an empty archive
    real = sandbox._container.api.get_archive
    for archive in (b"", b"\0" * 512, b"\0" * 1024, b"\0" * 10240):
        answer = (iter([archive]), {"mode": 0o644})
        monkeypatch.setattr(sandbox._container.api, "get_archive", lambda cid, path, a=answer: a)
        with pytest.raises(FileNotFoundError):
            sandbox.read_file("/tmp/gone")
    monkeypatch.setattr(sandbox._container.api, "get_archive", real)

"""``DockerSandbox.read_file`` of an archive with no member (the engine's answer for a file
that went away while it was read, and what Python 3.9/3.10's tarfile fails on with
``ValueError: negative seek value -1``) is ``FileNotFoundError``, on every Python."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("archive", [b"", b"\0" * 512, b"\0" * 1024, b"\0" * 10240])
def test_read_file_of_an_empty_archive_is_file_not_found(make_container, monkeypatch, archive):
    sandbox = make_container()
    monkeypatch.setattr(sandbox._api, "get_archive", lambda cid, path: (iter([archive]), {"mode": 0o644}))
    with pytest.raises(FileNotFoundError):
        sandbox.read_file("/tmp/gone")


def test_read_file_of_a_real_empty_file_is_empty_bytes(make_container):
    sandbox = make_container()
    sandbox.write_file("/tmp/empty", b"")
    assert sandbox.read_file("/tmp/empty") == b""

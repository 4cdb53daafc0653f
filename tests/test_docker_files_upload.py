"""How a file reaches a Docker container (``sandbox/docker_files.write_file``): a big upload's
folder is made before the upload, since an engine answers a missing folder's 404 before it
reads the body and then closes (past the socket buffers, the client sees the connection reset,
not the 404: the sandbox looked gone). The engine is a recording stand-in here; the real engine
runs the same path in tests/docker."""
from __future__ import annotations

import contextlib

from bridge_client.sandbox import docker_files
from bridge_client.sandbox.base import ExecResult


class _Engine:
    def __init__(self):
        self.folders = set()
        self.calls = []
        self.api = self
        self.id = "c0ffee" * 4
        self.short = self.id[:12]

    @contextlib.contextmanager
    def errors(self, path=None):
        yield

    def put_archive(self, container_id, folder, archive):
        self.calls.append(("put", folder))
        if folder not in self.folders:  # what Container.errors makes of the engine's 404
            raise FileNotFoundError(2, "no such file in container", folder)

    def run(self, argv):
        if argv[0] == "sh" and "mkdir -p" in argv[2]:
            self.calls.append(("mkdir", argv[-1]))
            self.folders.add(argv[-1])
        return ExecResult(0)


def test_a_big_file_s_folder_is_made_before_its_upload():
    engine = _Engine()
    data = b"x" * (docker_files._EARLY_ANSWER_BYTES + 1)
    docker_files.write_file(engine, "/s/wheelhouse/a.whl", data, mode=0o644, owner=(0, 0), run=engine.run)
    assert engine.calls == [("mkdir", "/s/wheelhouse"), ("put", "/s/wheelhouse")]


def test_a_small_file_is_uploaded_first_and_its_folder_made_on_a_404():
    engine = _Engine()
    docker_files.write_file(engine, "/s/state/f.json", b"{}", mode=0o600, owner=(0, 0), run=engine.run)
    assert engine.calls == [("put", "/s/state"), ("mkdir", "/s/state"), ("put", "/s/state")]
    engine.calls.clear()
    docker_files.write_file(engine, "/s/state/g.json", b"{}", mode=0o600, owner=(0, 0), run=engine.run)
    assert engine.calls == [("put", "/s/state")], "an existing folder costs no exec"

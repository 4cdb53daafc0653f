"""The host's pool of random bytes (client/randoms.py): every byte
handed out once, ids in uuid4's form, and a forked child never hands out its parent's
bytes (session and turn ids come from it: a child that repeated them would share sessions)."""
from __future__ import annotations

import os
import sys
import threading
import uuid

import pytest

from bridge_client.client import randoms


def test_bytes_are_handed_out_once_across_threads():
    got: list = []

    def take() -> None:
        got.extend(randoms.take(4) for _ in range(2000))

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 8000 and len(set(got)) > 7990  # 32-bit values: a few collide by chance at most
    ids = {randoms.uuid4_hex() for _ in range(1000)}
    assert len(ids) == 1000
    assert all(uuid.UUID(hex=i).version == 4 and len(i) == 32 for i in ids)


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "win32", reason="needs fork")
@pytest.mark.parametrize("hooks", [True, False])
def test_a_forked_child_never_repeats_its_parents_bytes(hooks, monkeypatch):
    randoms.take(1)  # a pool drawn in the parent, most of it still to hand out
    if not hooks:  # as after a fork that ran no at-fork hooks: the process id check alone
        monkeypatch.setattr(randoms, "_POOL", _NoHookPool())
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        try:
            os.write(write, randoms.take(64))
        finally:
            os._exit(0)
    os.close(write)
    child = b""
    while len(child) < 64:
        piece = os.read(read, 64)
        if not piece:
            break
        child += piece
    os.close(read)
    os.waitpid(pid, 0)
    assert len(child) == 64
    assert child != randoms.take(64), "the child handed out the parent's next bytes"


class _NoHookPool(randoms._Pool):
    """A pool whose at-fork hook does nothing (the real hook is registered on the module's
    pool, which this replaces): only the process id tells the child to draw anew."""

    def __init__(self) -> None:
        super().__init__()
        self.take(1)

    def after_fork_in_child(self) -> None:
        pass


def test_uuid4_hex_is_uuid4s_form_of_the_pools_bytes(monkeypatch):
    # uuid4_hex sets the version and variant bits itself (no uuid.UUID per turn id): the same
    # 32 digits uuid.UUID(bytes=..., version=4) gives for the bytes the pool handed out.
    for raw in (b"\x00" * 16, b"\xff" * 16, os.urandom(16), os.urandom(16)):
        monkeypatch.setattr(randoms._POOL, "take", lambda n, raw=raw: raw)
        assert randoms.uuid4_hex() == uuid.UUID(bytes=raw, version=4).hex

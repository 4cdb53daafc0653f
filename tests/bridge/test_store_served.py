"""The store's record of what it committed (``bridge.sqlite3-served``), on real files: it
follows every commit that adds parts, names no loss for a store that lost nothing, and gives no
verdict when it is torn or of another store (issue 27, item 6)."""
from __future__ import annotations

import os
import shutil
import struct

from bridge_client.state_dir import identity
from bridge_client.bridge.recovery import open_store
from bridge_client.bridge.store import Store, StoredPart, find_loss, part_op
from bridge_client.bridge.store.served import SUFFIX


def _parts(store: Store, turn: str, first: int, n: int) -> None:
    text = '{"type":"text-delta"}'
    ops = [part_op(None, turn, StoredPart(first + i, 0, 1, "text-delta", text)) for i in range(n)]
    store.wait(store.submit(*ops))


def _noted(path: str) -> int:
    with open(path + SUFFIX, "rb") as f:
        return struct.unpack("<32sQQ", f.read())[1]


def test_b10_the_record_follows_each_commit_and_a_store_that_lost_nothing_is_kept(tmp_path):
    path = str(tmp_path / identity.STORE_FILE)
    store = Store(path)
    for k in range(5):
        _parts(store, "t", k * 3, 3)
    (highest,) = store._reader.execute("SELECT max(rowid) FROM segments").fetchone()
    assert _noted(path) == highest == 5
    store.close()
    assert find_loss(path) is None
    opened = open_store(path)
    assert opened.moved is None
    opened.store.close()


def test_b10_a_copy_of_the_store_from_before_the_last_commits_is_a_loss(tmp_path):
    """What a -wal that lost its last frames shows: the file as it was some commits ago."""
    path = str(tmp_path / identity.STORE_FILE)
    early = str(tmp_path / "early")
    store = Store(path)
    _parts(store, "t", 0, 2)
    store.close()
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            shutil.copy(path + suffix, early + suffix)
    store = Store(path)
    _parts(store, "t", 2, 2)
    store.close()
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.unlink(path + suffix)
        if os.path.exists(early + suffix):
            shutil.copy(early + suffix, path + suffix)
    reason = find_loss(path)
    assert reason is not None and "up to segment 2, the file shows up to 1" in reason
    opened = open_store(path)
    try:
        assert opened.moved is not None and os.path.exists(opened.moved + SUFFIX)
    finally:
        opened.store.close()


def test_b10_a_torn_or_foreign_record_gives_no_verdict(tmp_path):
    path = str(tmp_path / identity.STORE_FILE)
    store = Store(path)
    _parts(store, "t", 0, 2)
    generation = store.generation
    store.close()
    with open(path + SUFFIX, "r+b") as f:  # a note half written: the check does not match
        f.seek(32)
        f.write(struct.pack("<Q", 99))
    assert find_loss(path) is None
    with open(path + SUFFIX, "wb") as f:  # a record of another store, ahead of this one
        f.write(struct.pack("<32sQQ", ("0" * 32).encode(), 99, 99 ^ 0x5A17_C0DE_B10B_10C5))
    assert generation != "0" * 32 and find_loss(path) is None
    opened = open_store(path)
    assert opened.moved is None and opened.store.generation == generation
    opened.store.close()

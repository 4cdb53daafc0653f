"""B03: telling a file system that takes no more writes from other failures (the bridge
program's exit status 3, see bridge_client/bridge/unwritable.py)."""
from __future__ import annotations

import errno
import sqlite3

import pytest

from bridge_client.bridge.launch import LaunchError
from bridge_client.state_dir.unwritable import is_full, unwritable_reason


@pytest.mark.parametrize(
    "exc",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        OSError(errno.EDQUOT, "Disk quota exceeded"),
        OSError(errno.EROFS, "Read-only file system"),
        sqlite3.OperationalError("database or disk is full"),
        sqlite3.OperationalError("attempt to write a readonly database"),
    ],
)
def test_b03_unwritable_reasons(exc):
    assert unwritable_reason(exc)


@pytest.mark.parametrize(
    "exc",
    [
        None,
        OSError(errno.EIO, "Input/output error"),
        OSError(errno.EACCES, "Permission denied"),
        sqlite3.DatabaseError("database disk image is malformed"),
        sqlite3.OperationalError("database is locked"),
        LaunchError("no such driver"),
    ],
)
def test_b03_other_failures_are_not_unwritable(exc):
    assert unwritable_reason(exc) is None


def test_b03_the_reason_is_found_behind_a_launch_error_raised_from_none():
    """serving.py raises ``LaunchError(...) from None`` over SQLite's error: the context is kept."""
    try:
        try:
            raise sqlite3.OperationalError("database or disk is full")
        except sqlite3.Error as inner:
            raise LaunchError(f"cannot open the store: {inner}") from None
    except LaunchError as exc:
        assert unwritable_reason(exc) == "database or disk is full"


def test_b03_a_file_system_with_room_is_not_full(tmp_path):
    assert is_full(str(tmp_path)) is False
    assert is_full(str(tmp_path / "missing")) is False

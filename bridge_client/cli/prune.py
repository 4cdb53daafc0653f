"""``bridge-client prune``: remove what no longer serves, from the local state directory.

Two kinds of leftovers pile up under the state directory (``BRIDGE_CLIENT_HOME``):

- the state directories of bridges that are not running (each keeps its store of turns and
  its log until removed): a directory is dead when no bridge process holds its lock and
  nothing in it changed for ``--min-age`` seconds (a host may be launching a bridge there);
- the turn state files that ``run`` saves when a turn is suspended (``<home>/turns``): one is
  done with when its turn has finished in its bridge's store, or when that bridge's state
  directory is gone.

Only local sandboxes are looked at (a container's bridges are inside the container, and a
state file of a turn that runs in one is kept). ``--dry-run`` prints what would go and
removes nothing. See the *Command line* guide (``cli``).
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import sqlite3
import time
from typing import Any, Dict, List, Optional, Tuple

from ..state_dir import identity
from ..paths import user_home
from .arguments import add_verbose
from .bridge_dirs import local_state_roots
from .exits import UsageError
from .output import print_out

__all__ = ["add_command", "prune_plan"]

_DESCRIPTION = (
    "Remove the state directories of bridges that are not running (with the turns they keep) "
    "and the saved state files of turns that finished, from the local state directory. "
    "--dry-run prints what would be removed."
)


def add_command(commands: Any) -> None:
    """Add ``prune`` to the ``bridge-client`` sub-commands."""
    p = commands.add_parser("prune", help="remove dead bridges' state and finished turns' state files",
                            description=_DESCRIPTION)
    p.add_argument("--dry-run", action="store_true", help="print what would be removed; remove nothing")
    p.add_argument(
        "--min-age", type=float, default=60.0, metavar="SECONDS",
        help="keep a bridge's state directory that changed less than SECONDS ago (default: %(default)g)",
    )
    add_verbose(p)
    p.set_defaults(func=_cmd_prune)


def _lock_is_free(folder: str) -> bool:
    """Whether no bridge process holds the state directory's lock (a running bridge does)."""
    path = os.path.join(folder, identity.LOCK_FILE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    finally:
        os.close(fd)


def _newest_change(folder: str) -> float:
    newest = 0.0
    for name in os.listdir(folder):
        try:
            newest = max(newest, os.lstat(os.path.join(folder, name)).st_mtime)
        except OSError:
            pass
    return max(newest, os.lstat(folder).st_mtime)


def _turn_status(store: str, turn_id: str) -> Optional[str]:
    """The turn's status in a bridge's store (``None``: not there or unreadable)."""
    if not os.path.exists(store):
        return None
    try:
        db = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=1.0)
        try:
            row = db.execute("SELECT status FROM turns WHERE id = ?", (turn_id,)).fetchone()
        finally:
            db.close()
    except sqlite3.Error:
        return None
    return str(row[0]) if row else None


def _bridge_folders(home: str) -> Dict[str, List[str]]:
    """Every local bridge's state directory, by bridge id (one id may have a folder in each
    of several sandboxes)."""
    found: Dict[str, List[str]] = {}
    for root in local_state_roots(home):
        bridges = os.path.join(root, "bridges")
        try:
            names = os.listdir(bridges)
        except OSError:
            continue
        for name in names:
            if os.path.isdir(os.path.join(bridges, name)):
                found.setdefault(name, []).append(os.path.join(bridges, name))
    return found


def prune_plan(home: str, min_age: float) -> Tuple[List[Tuple[str, str]], List[Tuple[str, str]]]:
    """What ``prune`` removes: ``(turn state files, bridge state directories)``, each a list of
    ``(path, why)``. Removes nothing."""
    folders = _bridge_folders(home)
    now = time.time()
    dead = {
        folder for group in folders.values() for folder in group
        if _lock_is_free(folder) and now - _newest_change(folder) >= min_age
    }
    files: List[Tuple[str, str]] = []
    turns = os.path.join(home, "turns")
    for name in sorted(os.listdir(turns)) if os.path.isdir(turns) else []:
        path = os.path.join(turns, name)
        try:
            with open(path, "rb") as f:
                record = json.loads(f.read())
            bridge_id, turn_id = str(record["bridgeId"]), str(record["turnId"])
            where = record.get("sandbox")
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not a state file of ours: left alone
        if isinstance(where, str) and not where.startswith("/"):
            continue  # a turn in a container: its bridge is not looked at from here
        group = folders.get(bridge_id, [])
        live = [folder for folder in group if folder not in dead]
        if not live:
            why = "its bridge's state is gone" if not group else "its bridge is not running"
            files.append((path, why))
            continue
        statuses = [_turn_status(os.path.join(f, identity.STORE_FILE), turn_id) for f in live]
        if "finished" in statuses:
            files.append((path, "the turn finished"))
    dirs = [(folder, "no bridge runs there") for folder in sorted(dead)]
    return files, dirs


def _cmd_prune(args: argparse.Namespace) -> int:
    if args.min_age < 0:
        raise UsageError("--min-age must be >= 0")
    home = user_home()
    files, dirs = prune_plan(home, args.min_age)
    verb = "would remove" if args.dry_run else "removed"
    for path, why in files:
        if not args.dry_run:
            try:
                os.remove(path)
            except FileNotFoundError:
                continue
        print_out(f"{verb} turn state {path} ({why})")
    for folder, why in dirs:
        if not args.dry_run:
            if not _lock_is_free(folder):  # a bridge started there meanwhile
                continue
            shutil.rmtree(folder)
            _remove_if_empty(os.path.dirname(os.path.dirname(folder)))
        print_out(f"{verb} bridge state {folder} ({why})")
    if not files and not dirs:
        print_out(f"nothing to prune in {home}")
    return 0


def _remove_if_empty(sandbox_root: str) -> None:
    """Drop a sandbox's state root once its last bridge is gone (``bridges/`` then itself)."""
    for folder in (os.path.join(sandbox_root, "bridges"), sandbox_root):
        try:
            os.rmdir(folder)
        except OSError:
            return

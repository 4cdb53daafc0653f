"""``bridge-client prune``: remove what no longer serves, from the local state directory.

Two kinds of leftovers pile up under the state directory (``BRIDGE_CLIENT_HOME``):

- the state directories of bridges that are not running (each keeps its store of turns and
  its log until removed): a directory is dead when no bridge process holds its lock and
  nothing in it changed for ``--min-age`` seconds (a host may be launching a bridge there);
- the turn state files that ``run`` saves when a turn is suspended (``<home>/turns``): one is
  done with when its turn has finished in its bridge's store, or when that bridge's state
  directory is gone;
- the template marks of a sandbox where no bridge runs any more (``<state root>/template-marks``:
  they only spare a launch the template's checks, which the next launch then runs again).

``--sandbox DIR`` limits all three to one local folder's sandbox. Only local sandboxes are
looked at (a container's bridges are inside the container, and a
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

from ..paths import user_home
from ..sandbox.local import FOLDER_RECORD, LocalSandbox
from ..sandbox.template_step import MARKS_DIR
from ..sandbox.urls import is_sandbox_url
from ..state_dir import identity
from .arguments import add_verbose
from .bridge_dirs import local_state_roots
from .exits import UsageError
from .output import print_out

__all__ = ["add_command", "prune_plan"]

_DESCRIPTION = (
    "Remove the state directories of bridges that are not running (with the turns they keep) "
    "the saved state files of turns that finished, and the template marks of sandboxes where "
    "no bridge runs, from the local state directory. --dry-run prints what would be removed."
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
    p.add_argument(
        "--sandbox", metavar="DIR",
        help="only the sandbox of this local folder (it may have been removed); default: every local one",
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


def _bridge_folders(roots: List[str]) -> Dict[str, List[str]]:
    """Every bridge's state directory under the state ``roots``, by bridge id (one id may have
    a folder in each of several sandboxes)."""
    found: Dict[str, List[str]] = {}
    for root in roots:
        bridges = os.path.join(root, "bridges")
        try:
            names = os.listdir(bridges)
        except OSError:
            continue
        for name in names:
            if os.path.isdir(os.path.join(bridges, name)):
                found.setdefault(name, []).append(os.path.join(bridges, name))
    return found


Plan = List[Tuple[str, str]]


def prune_plan(home: str, min_age: float, folder: Optional[str] = None) -> Tuple[Plan, Plan, Plan]:
    """What ``prune`` removes: ``(turn state files, bridge state directories, template marks
    folders)``, each a list of ``(path, why)``; with ``folder``, only what belongs to the
    sandbox of that local folder. Removes nothing."""
    if folder is None:
        roots, label = local_state_roots(home), None
    else:
        roots = [os.path.join(home, "sandboxes", LocalSandbox.id_for(folder))]
        label = os.path.realpath(folder)
    folders = _bridge_folders(roots)
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
        if label is not None and where != label:
            continue  # another sandbox's turn (or one that does not say): not asked about
        group = folders.get(bridge_id, [])
        live = [folder for folder in group if folder not in dead]
        if not live:
            why = "its bridge's state is gone" if not group else "its bridge is not running"
            files.append((path, why))
            continue
        statuses = [_turn_status(os.path.join(f, identity.STORE_FILE), turn_id) for f in live]
        if "finished" in statuses:
            files.append((path, "the turn finished"))
    dirs = [(path, "no bridge runs there") for path in sorted(dead)]
    live_roots = {os.path.dirname(os.path.dirname(p)) for g in folders.values() for p in g if p not in dead}
    marks = [
        (os.path.join(root, MARKS_DIR), "no bridge runs in that sandbox")
        for root in roots
        if root not in live_roots and os.path.isdir(os.path.join(root, MARKS_DIR))
    ]
    return files, dirs, marks


def _cmd_prune(args: argparse.Namespace) -> int:
    if args.min_age < 0:
        raise UsageError("--min-age must be >= 0")
    home = user_home()
    only = args.sandbox
    if only is not None and (is_sandbox_url(only) or only.startswith("docker:")):
        raise UsageError(f"--sandbox {only}: prune looks at local folders only")
    files, dirs, marks = prune_plan(home, args.min_age, only)
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
    for path, why in marks:
        if not args.dry_run:
            shutil.rmtree(path, ignore_errors=True)
            _remove_if_empty(os.path.dirname(path))
        print_out(f"{verb} template marks {path} ({why})")
    if not files and not dirs and not marks:
        print_out(f"nothing to prune in {home}")
    return 0


def _remove_if_empty(sandbox_root: str) -> None:
    """Drop a sandbox's state root once its last bridge is gone (``bridges/``, the record of its
    folder when nothing else is left, then itself)."""
    for folder in (os.path.join(sandbox_root, "bridges"), sandbox_root):
        if folder == sandbox_root:
            try:
                if os.listdir(sandbox_root) == [FOLDER_RECORD]:
                    os.remove(os.path.join(sandbox_root, FOLDER_RECORD))
            except OSError:
                return
        try:
            os.rmdir(folder)
        except FileNotFoundError:
            continue  # removed already
        except OSError:
            return

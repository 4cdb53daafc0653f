"""The bridges' state directories in a sandbox: what a bridge id looks like, whether a turn's
bridge is there, and the rows ``bridge-client bridges`` lists for one sandbox or for every
local sandbox under the home (``--all``), with their agent options.

A bridge is found by its state directory (``<state root>/bridges/<bridge id>``): its
``launch.json`` names the agent and its options, its listening file the pid and port, and a
``/healthz`` answer on that port tells that it is alive. See the *Command line* guide
(``cli``).
"""
from __future__ import annotations

import json
import os
import posixpath
import re
import subprocess
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from ..state_dir import identity
from ..paths import user_home
from ..sandbox.base import Endpoint, ExecResult, Sandbox
from ..sandbox.local import FOLDER_RECORD, LocalSandbox
from ..wire.parts import TurnState

__all__ = [
    "BRIDGE_ID", "has_bridge", "bridge_rows", "local_state_roots", "print_bridges", "LocalStateRoot",
    "OPTIONS_WIDTH", "RemovedFolder",
]

OPTIONS_WIDTH = 40
"""Characters of the options column in the table (``--json`` has them all)."""


BRIDGE_ID = re.compile(r"[0-9a-f]{%d}\Z" % identity.BRIDGE_ID_LENGTH)
"""What a bridge id looks like (the name of its state directory)."""


def has_bridge(sandbox: Sandbox, state: TurnState) -> bool:
    """Whether the turn's bridge has its state directory (its ``launch.json`` naming it and the
    turn's agent) in ``sandbox``: when it has not, ``continue_turn`` runs the turn again from
    its prompt."""
    if not BRIDGE_ID.match(state.bridge_id):
        return False
    path = posixpath.join(identity.state_dir(sandbox.state_root, state.bridge_id), identity.LAUNCH_FILE)
    try:
        info = identity.parse_launch(sandbox.read_file(path))
    except (OSError, ValueError):
        return False
    return info.bridge_id == state.bridge_id and info.agent_id == state.agent_id


class LocalStateRoot:
    """A local sandbox's state root under the home: its id, and the folder it belongs to when
    the root records it (:data:`~bridge_client.sandbox.local.FOLDER_RECORD`; else ``folder`` is
    ``None`` and a live bridge's working folder tells it).

    Has what :func:`bridge_rows` uses of a :class:`~bridge_client.sandbox.base.Sandbox`.
    """

    def __init__(self, state_root: str) -> None:
        self.state_root = state_root
        self.id = os.path.basename(state_root)
        self.folder: Optional[str] = None
        try:
            recorded = identity.optional_read(os.path.join(state_root, FOLDER_RECORD))
        except (OSError, ValueError):  # not this user's own, or unreadable: no record
            recorded = None
        if recorded and LocalSandbox.id_for(os.fsdecode(recorded)) == self.id:
            self.folder = os.fsdecode(recorded)

    def read_file(self, path: str) -> bytes:
        """The bytes of a file on this machine."""
        with open(path, "rb") as f:
            return f.read()

    def expose(self, port: int) -> Endpoint:
        """``ws://127.0.0.1:<port>/``, as for a LocalSandbox."""
        return Endpoint(f"ws://127.0.0.1:{int(port)}/")


class RemovedFolder(LocalStateRoot):
    """A local sandbox folder that was removed while bridges of it may still run: found by the
    id its path had (its state root under the home is still there), so that ``bridges`` and
    ``stop`` work on it. Has what ``stop`` uses of a sandbox: ``workdir`` (the path given, made
    absolute) and ``exec`` (commands run from ``/``: there is no folder to run them in)."""

    def __init__(self, state_root: str, workdir: str) -> None:
        super().__init__(state_root)
        self.workdir = workdir

    def exec(self, argv: List[str], **_: Any) -> ExecResult:
        """Run ``argv`` to completion from ``/`` (``kill``, for ``stop``).

        Raises:
            FileNotFoundError: the program does not exist.
        """
        done = subprocess.run(argv, cwd="/", stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
        return ExecResult(done.returncode, done.stdout, done.stderr)


def removed_folder(path: str, home: Optional[str] = None) -> Optional[RemovedFolder]:
    """The :class:`RemovedFolder` for ``path`` when no folder is there but bridges of one were
    (its state root exists under ``home``, default the user's home), else ``None``."""
    root = os.path.join(home or user_home(), "sandboxes", LocalSandbox.id_for(path))
    if os.path.exists(path) or not os.path.isdir(os.path.join(root, "bridges")):
        return None
    return RemovedFolder(root, os.path.abspath(path))


def local_state_roots(home: Optional[str] = None) -> List[str]:
    """The state roots of every local sandbox under ``home`` (default: the user's home)."""
    folder = os.path.join(home or user_home(), "sandboxes")
    try:
        names = sorted(os.listdir(folder))
    except FileNotFoundError:
        return []
    return [os.path.join(folder, n) for n in names if os.path.isdir(os.path.join(folder, n))]


def _list_folder(sandbox: Sandbox, folder: str) -> List[str]:
    """The names in a folder of a sandbox that is not on this machine (``ls`` in there)."""
    listed = sandbox.exec(["ls", "-1A", folder], cwd="/")
    if not listed.ok:
        raise FileNotFoundError(folder)
    return sorted(listed.stdout.decode("utf-8", "surrogateescape").split("\n")[:-1])


def _healthy(sandbox: Any, port: int, instance: str) -> bool:
    """Whether the bridge that wrote a listening file answers on its port: ``/healthz`` must
    answer 200 and name the file's ``instance`` (another bridge may have the port now; a
    bridge whose health answer names no instance, an older one, is taken at its word)."""
    from urllib.parse import quote

    import requests

    from ..client.transport import proxy_for

    endpoint = sandbox.expose(port)
    url = endpoint.url.replace("ws://", "http://", 1).replace("wss://", "https://", 1)
    try:
        with requests.Session() as http:
            # The same route as the WebSocket takes (client/transport.py): loopback direct,
            # proxies from the environment otherwise, the provider's headers.
            http.trust_env = False
            proxy = proxy_for(endpoint.url)
            if proxy is not None and proxy["proxy_type"] == "http":
                auth = proxy["http_proxy_auth"]
                who = f"{quote(auth[0], safe='')}:{quote(auth[1], safe='')}@" if auth else ""
                address = f"http://{who}{proxy['http_proxy_host']}:{proxy['http_proxy_port']}"
                http.proxies = {"http": address, "https": address}
            response = http.get(url.rstrip("/") + "/healthz", headers=dict(endpoint.headers), timeout=1.0)
            if response.status_code != 200:
                return False
            body = response.json()
            if not isinstance(body, dict) or body.get("protocol") is None:
                return False
            return body.get("instance") in (None, instance)
    except (requests.RequestException, ValueError):
        return False


def store_counts(path: str) -> Dict[str, Any]:
    """Sessions, turns and running turns in a bridge's store on this machine (``"?"`` when
    it cannot be read)."""
    import sqlite3

    if not os.path.exists(path):
        return {"sessions": 0, "turns": 0, "running": 0}
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1.0)
        try:
            sessions = db.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
            turns, running = db.execute(
                "SELECT COUNT(*), COALESCE(SUM(status = 'running'), 0) FROM turns"
            ).fetchone()
        finally:
            db.close()
    except sqlite3.Error:
        return {"sessions": "?", "turns": "?", "running": "?"}
    return {"sessions": sessions, "turns": turns, "running": running}


def _workdir_of(pid: int) -> Optional[str]:
    """The working folder of a live local bridge (its sandbox's folder), when readable."""
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None


def bridge_rows(sandbox: Any) -> List[Dict[str, Any]]:
    """One row per bridge state directory of ``sandbox`` (a Sandbox or a LocalStateRoot).

    Keys: ``id``, ``sandbox`` (its folder when known, else the sandbox id), ``agent``,
    ``options`` (the agent options, as JSON values), ``pid``, ``port``, ``alive``,
    ``sessions``, ``turns``, ``running`` (``"?"`` for a store inside a container).
    """
    root = posixpath.join(sandbox.state_root, "bridges")
    local = isinstance(sandbox, (LocalSandbox, LocalStateRoot))
    try:
        names = sorted(os.listdir(root)) if local else _list_folder(sandbox, root)
    except FileNotFoundError:
        return []
    where = sandbox.workdir if isinstance(sandbox, LocalSandbox) else getattr(sandbox, "folder", None)
    rows = []
    for name in names:
        folder = posixpath.join(root, name)
        row: Dict[str, Any] = {
            "id": name, "sandbox": where or sandbox.id, "agent": "?", "options": None,
            "pid": None, "port": None, "alive": False, "running": "?",
        }
        try:
            launch = identity.parse_launch(sandbox.read_file(posixpath.join(folder, identity.LAUNCH_FILE)))
            row.update(agent=launch.agent_id, options=launch.agent_options)
        except (OSError, ValueError):
            pass
        try:
            listening = sandbox.read_file(posixpath.join(folder, identity.LISTENING_FILE))
            info = identity.parse_listening(listening)
            row.update(pid=info.pid, port=info.port, alive=_healthy(sandbox, info.port, info.instance))
        except (OSError, ValueError):
            pass
        if local:
            row.update(store_counts(posixpath.join(folder, identity.STORE_FILE)))
            if where is None and row["alive"]:
                row["sandbox"] = _workdir_of(int(row["pid"])) or sandbox.id
        else:  # the store is inside a container: not opened from here
            row.update(sessions="?", turns="?", running="?")
        rows.append(row)
    return rows


def _options_text(options: Any) -> str:
    if options is None:
        return "-"
    text = json.dumps(options, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text if len(text) <= OPTIONS_WIDTH else text[: OPTIONS_WIDTH - 3] + "..."


def _table(rows: List[Dict[str, Any]], with_sandbox: bool) -> Iterator[str]:
    header: Tuple[str, ...] = (
        "BRIDGE ID", "AGENT", "OPTIONS", "PID", "PORT", "ALIVE", "SESSIONS", "TURNS", "RUNNING",
    )
    if with_sandbox:
        header = ("SANDBOX",) + header
    table = [header]
    for r in rows:
        cells: Tuple[str, ...] = (
            r["id"], r["agent"], _options_text(r["options"]), str(r["pid"] or "-"), str(r["port"] or "-"),
            "yes" if r["alive"] else "no", str(r["sessions"]), str(r["turns"]), str(r["running"]),
        )
        table.append((str(r["sandbox"]),) + cells if with_sandbox else cells)
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        yield "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()


def print_bridges(
    sandboxes: List[Any], as_json: bool, empty: str, out: Callable[[str], None]
) -> int:
    """Print the bridges of ``sandboxes`` (a table, or one JSON object a line); return 0.

    Args:
        sandboxes: Sandboxes or LocalStateRoots; with more than one (``--all``), the table
            has a SANDBOX column.
        as_json: one JSON object per bridge instead of the table.
        empty: the line printed when there are no bridges.
        out: prints one line of output.
    """
    rows = [row for sandbox in sandboxes for row in bridge_rows(sandbox)]
    if as_json:
        for row in rows:
            out(json.dumps(row, ensure_ascii=False))
        return 0
    if not rows:
        out(empty)
        return 0
    for line in _table(rows, with_sandbox=len(sandboxes) > 1 or isinstance(sandboxes[0], LocalStateRoot)):
        out(line)
    return 0

"""A CLI agent's own transcript, carried in a session export (see :doc:`portable-sessions`).

- Claude Code keeps each session as ``<config dir>/projects/<cwd with every character but
  letters and digits made '-'>/<session id>.jsonl``, where the config dir is
  ``$CLAUDE_CONFIG_DIR``, else ``~/.claude``. The export takes that file; the import writes
  it where the CLI looks for it from the new workspace, so that ``--resume`` finds it there.
- Qwen Code keeps each session as ``~/.qwen/projects/<cwd, made as for Claude
  Code>/chats/<session id>.jsonl``; pi as ``<agent dir>/sessions/--<cwd without its first
  '/', every '/', '\\' and ':' made '-'>--/<time>_<session id>.jsonl`` (the agent dir is
  ``$PI_CODING_AGENT_DIR``, else ``~/.pi/agent``): both go back under the new workspace's
  folder (Qwen Code's records naming the old workspace as their ``cwd`` name the new one).
- Codex keeps each thread as ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<thread
  id>.jsonl`` (``CODEX_HOME`` defaults to ``~/.codex``), found by its id wherever the CLI
  runs: the import writes it back at the same place under the new ``CODEX_HOME``.

Files travel as ``{"name": str, "text": str}`` (UTF-8 text; a transcript is JSON lines).
"""
from __future__ import annotations

import glob
import json
import os
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..private_files import write_whole
from .workspace import workspace_dir

__all__ = [
    "claude_config_dir",
    "claude_project_dir",
    "export_claude",
    "import_claude",
    "claude_export_files",
    "claude_import_files",
    "codex_export_files",
    "codex_import_files",
    "qwen_export_files",
    "qwen_import_files",
    "pi_export_files",
    "pi_import_files",
    "CLAUDE_TRANSCRIPT",
]

CLAUDE_TRANSCRIPT = "claude-code/session.jsonl"
"""The name of Claude Code's transcript among an export's files."""

_SID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")


def claude_config_dir() -> str:
    """Where Claude Code keeps its settings and projects: ``$CLAUDE_CONFIG_DIR``, else
    ``~/.claude``."""
    return os.environ.get("CLAUDE_CONFIG_DIR") or os.path.join(os.path.expanduser("~"), ".claude")


def claude_project_dir(cwd: str) -> str:
    """The folder of Claude Code's transcripts of sessions run in ``cwd``."""
    name = re.sub(r"[^A-Za-z0-9]", "-", os.path.realpath(cwd))
    return os.path.join(claude_config_dir(), "projects", name)


def _session_id(data: Any) -> Optional[str]:
    sid = data.get("session_id") if isinstance(data, dict) else None
    return sid if isinstance(sid, str) and _SID.match(sid) else None


def _whole_lines(path: str) -> Optional[str]:
    """The file's text up to its last newline (a line the CLI is writing is left out), or
    ``None`` when it cannot be read as UTF-8."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError):
        return None
    return text[: text.rfind("\n") + 1]


def _write_whole(path: str, text: str) -> None:
    """Write ``text`` at ``path`` whole (a temporary file renamed), mode 0600.

    Raises:
        OSError: the folder cannot be made or written.
    """
    folder = os.path.dirname(path)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    write_whole(path, text.encode("utf-8"))


def export_claude(data: Any, cwd: Optional[str] = None) -> List[Dict[str, str]]:
    """The transcript of the Claude Code session that ``data`` (the driver's session state,
    ``{"session_id": ...}``) names: ``[{"name": CLAUDE_TRANSCRIPT, "text": ...}]``, or ``[]``
    when there is none (no CLI session yet, or its file is gone). The one of ``cwd``'s project
    (default: the working folder) first, else any project's; whole lines only (a line the CLI
    is writing meanwhile is left out)."""
    sid = _session_id(data)
    if sid is None:
        return []
    mine = os.path.join(claude_project_dir(cwd or os.getcwd()), f"{sid}.jsonl")
    found = [mine] if os.path.isfile(mine) else sorted(
        glob.glob(os.path.join(glob.escape(claude_config_dir()), "projects", "*", f"{sid}.jsonl"))
    )
    for path in found:
        try:
            with open(path, encoding="utf-8", errors="surrogateescape") as f:
                text = f.read()
            text.encode("utf-8")
        except (OSError, UnicodeEncodeError):
            continue
        # A CLI that is writing its next line meanwhile: only whole lines are taken.
        return [{"name": CLAUDE_TRANSCRIPT, "text": text[: text.rfind("\n") + 1]}]
    return []


def import_claude(data: Any, files: Sequence[Dict[str, Any]], cwd: Optional[str] = None) -> None:
    """Put the transcript among ``files`` back where Claude Code, run in ``cwd`` (default: the
    working folder), looks for the session ``data`` names; written whole (a temporary file
    renamed), mode 0600. Nothing to do without a session id or a transcript.

    Raises:
        OSError: the config dir cannot be written.
    """
    sid = _session_id(data)
    texts = [
        f["text"] for f in files if f.get("name") == CLAUDE_TRANSCRIPT and isinstance(f.get("text"), str)
    ]
    if sid is None or not texts:
        return
    _write_whole(os.path.join(claude_project_dir(cwd or os.getcwd()), f"{sid}.jsonl"), texts[0])


def claude_export_files(driver: Any, data: Any) -> List[Dict[str, str]]:
    """The Claude Code driver's ``export_files``: the CLI's transcript of the session ``data``
    names, from the driver's workspace (:func:`export_claude`)."""
    return export_claude(data, workspace_dir())


def claude_import_files(driver: Any, data: Any, files: Sequence[Dict[str, Any]]) -> None:
    """The Claude Code driver's ``import_files``: the export's transcript put back where the
    CLI finds it from the driver's workspace (:func:`import_claude`).

    Raises:
        OSError: the config dir cannot be written.
    """
    import_claude(data, files, workspace_dir())


_CODEX = "codex/"
_ROLLOUT = re.compile(r"sessions/[0-9]{4}/[0-9]{2}/[0-9]{2}/rollout-[A-Za-z0-9._:-]+\.jsonl\Z")


def codex_home() -> str:
    """Where Codex keeps its config and threads: ``$CODEX_HOME``, else ``~/.codex``."""
    return os.environ.get("CODEX_HOME") or os.path.join(os.path.expanduser("~"), ".codex")


def codex_export_files(driver: Any, data: Any) -> List[Dict[str, str]]:
    """The Codex driver's ``export_files``: the rollout of the thread ``data``
    (``{"thread_id": ...}``) names, as ``[{"name": "codex/sessions/.../rollout-...jsonl",
    "text": ...}]`` (whole lines), or ``[]`` when there is none."""
    tid = data.get("thread_id") if isinstance(data, dict) else None
    if not isinstance(tid, str) or not _SID.match(tid):
        return []
    home = codex_home()
    pattern = os.path.join(glob.escape(home), "sessions", "*", "*", "*", f"rollout-*-{tid}.jsonl")
    for path in sorted(glob.glob(pattern)):
        text = _whole_lines(path)
        rel = os.path.relpath(path, home).replace(os.sep, "/")
        if text is not None and _ROLLOUT.match(rel):
            return [{"name": _CODEX + rel, "text": text}]
    return []


def codex_import_files(driver: Any, data: Any, files: Sequence[Dict[str, Any]]) -> None:
    """The Codex driver's ``import_files``: each rollout among ``files`` written back at its
    place under ``CODEX_HOME`` (names that are not a rollout's are ignored).

    Raises:
        OSError: ``CODEX_HOME`` cannot be written.
    """
    for f in files:
        name, text = f.get("name"), f.get("text")
        if isinstance(name, str) and isinstance(text, str) and name.startswith(_CODEX):
            rel = name[len(_CODEX):]
            if _ROLLOUT.match(rel):
                _write_whole(os.path.join(codex_home(), *rel.split("/")), text)


def _first_whole(paths: Sequence[str]) -> Optional[Tuple[str, str]]:
    """The first of ``paths`` that reads as UTF-8: ``(path, its whole lines)``."""
    for path in paths:
        text = _whole_lines(path)
        if text is not None:
            return path, text
    return None


def _qwen_projects() -> str:
    return os.path.join(os.path.expanduser("~"), ".qwen", "projects")


def _qwen_dir(cwd: str) -> str:
    return os.path.join(_qwen_projects(), re.sub(r"[^A-Za-z0-9]", "-", os.path.realpath(cwd)), "chats")


QWEN_TRANSCRIPT = "qwen/session.jsonl"
"""The name of Qwen Code's transcript among an export's files."""


def qwen_export_files(driver: Any, data: Any) -> List[Dict[str, str]]:
    """The Qwen driver's ``export_files``: the CLI's transcript of the session ``data``
    names (the workspace's project first, else any project's), whole lines, or ``[]``."""
    sid = _session_id(data)
    if sid is None:
        return []
    mine = os.path.join(_qwen_dir(workspace_dir()), f"{sid}.jsonl")
    others = sorted(glob.glob(os.path.join(glob.escape(_qwen_projects()), "*", "chats", f"{sid}.jsonl")))
    found = _first_whole(([mine] if os.path.isfile(mine) else []) + others)
    return [] if found is None else [{"name": QWEN_TRANSCRIPT, "text": found[1]}]


def qwen_import_files(driver: Any, data: Any, files: Sequence[Dict[str, Any]]) -> None:
    """The Qwen driver's ``import_files``: the transcript put back under the workspace's
    project. Raises: OSError: it cannot be written."""
    sid = _session_id(data)
    texts = [f["text"] for f in files if f.get("name") == QWEN_TRANSCRIPT and isinstance(f.get("text"), str)]
    if sid is not None and texts:
        here = workspace_dir()
        _write_whole(os.path.join(_qwen_dir(here), f"{sid}.jsonl"), _moved_cwd(texts[0], here))


def _moved_cwd(text: str, cwd: str) -> str:
    """``text`` (JSON lines) with the ``cwd`` of its records that name the first record's
    folder made ``cwd``: Qwen Code resumes only a session whose first record's ``cwd`` is the
    project it runs in. Lines that are not JSON objects stay as they are."""
    lines = text.splitlines(keepends=True)
    old: Optional[str] = None
    out = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            out.append(line)
            continue
        if isinstance(record, dict) and isinstance(record.get("cwd"), str):
            old = record["cwd"] if old is None else old
            if record["cwd"] == old:
                record["cwd"] = cwd
                line = json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
        out.append(line)
    return "".join(out)


def _pi_sessions() -> str:
    agent = os.environ.get("PI_CODING_AGENT_DIR") or os.path.join(os.path.expanduser("~"), ".pi", "agent")
    return os.path.join(agent, "sessions")


def _pi_dir(cwd: str) -> str:
    safe = re.sub(r"[/\\:]", "-", re.sub(r"^[/\\]", "", os.path.realpath(cwd)))
    return os.path.join(_pi_sessions(), f"--{safe}--")


_PI_FILE = re.compile(r"[A-Za-z0-9._:-]+\.jsonl\Z")


def pi_export_files(driver: Any, data: Any) -> List[Dict[str, str]]:
    """The pi driver's ``export_files``: pi's session file of the session ``data`` names
    (``"pi/<its file name>"``; the workspace's folder first, else any), whole lines, or ``[]``."""
    sid = _session_id(data)
    if sid is None:
        return []
    mine = sorted(glob.glob(os.path.join(glob.escape(_pi_dir(workspace_dir())), f"*_{sid}.jsonl")))
    others = sorted(glob.glob(os.path.join(glob.escape(_pi_sessions()), "*", f"*_{sid}.jsonl")))
    found = _first_whole(mine + others)
    if found is None or not _PI_FILE.match(os.path.basename(found[0])):
        return []
    return [{"name": "pi/" + os.path.basename(found[0]), "text": found[1]}]


def pi_import_files(driver: Any, data: Any, files: Sequence[Dict[str, Any]]) -> None:
    """The pi driver's ``import_files``: the session file put back under the workspace's
    folder (a name that is not one of the session's is ignored). Raises: OSError."""
    sid = _session_id(data)
    for f in files:
        name, text = f.get("name"), f.get("text")
        if sid is None or not isinstance(name, str) or not isinstance(text, str):
            continue
        if not name.startswith("pi/"):
            continue
        base = name[3:]
        if _PI_FILE.match(base) and base.endswith(f"_{sid}.jsonl"):
            _write_whole(os.path.join(_pi_dir(workspace_dir()), base), text)

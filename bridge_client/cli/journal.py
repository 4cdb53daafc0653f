"""The journal of a command's session (``run --journal``): where it is kept, and the one
command that restores the session from it when its sandbox is gone. See the *Portable
sessions* guide (``portable-sessions``)."""
from __future__ import annotations

import os
import shlex
from typing import Optional

from ..paths import user_home

__all__ = ["JOURNAL_HELP", "journal_path", "restore_hint"]

JOURNAL_HELP = (
    "keep an export of the session on this machine, written at the end of each turn (under the "
    "state directory, journals/SESSION_ID.export): when the sandbox is gone, the error prints "
    "the `bridge-client restore` command that brings the session back elsewhere"
)


def journal_path(session_id: str) -> str:
    """Where ``CreateSessionOptions(journal=True)`` keeps the journal of ``session_id``."""
    return os.path.join(user_home(), "journals", f"{session_id}.export")


def restore_hint(session_id: str) -> Optional[str]:
    """``"; restore it from its journal: bridge-client restore PATH --sandbox NEW"`` when the
    session has a journal on this machine, else ``None``."""
    path = journal_path(session_id)
    if not os.path.isfile(path):
        return None
    return f"; restore it from its journal: bridge-client restore {shlex.quote(path)} --sandbox NEW"

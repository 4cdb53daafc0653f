"""Helpers for the interactive-turns suite: a shell session with approvals, and reading a turn
up to a part."""
from __future__ import annotations

import os
from typing import Any, Callable, List, Optional

import bridge_client as bc
from host_support import options, session_options


def shell_session(sandbox: Any, **kw: Any) -> bc.Session:
    """A session of the shell agent in ``sandbox`` (approvals on unless told otherwise)."""
    kw.setdefault("approvals", True)
    return bc.create_session(options("shell"), session_options(sandbox, **kw))


def read_until(turn: bc.Turn, seen: List[bc.Part], want: Callable[[bc.Part], bool]) -> bc.Part:
    """Read ``turn`` into ``seen`` until a part ``want`` accepts; return it."""
    for part in turn:
        seen.append(part)
        if want(part):
            return part
    raise AssertionError(f"the turn ended without the part wanted: {[p.type for p in seen]}")


def next_request(turn: bc.Turn, seen: List[bc.Part]) -> bc.ApprovalRequest:
    """Read ``turn`` up to its next approval request."""
    part = read_until(turn, seen, lambda p: isinstance(p, bc.ApprovalRequest))
    assert isinstance(part, bc.ApprovalRequest)
    return part


def lines(path: str) -> Optional[List[str]]:
    """The lines of a file, or ``None`` when it does not exist."""
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def of_type(parts: List[bc.Part], cls: type) -> List[Any]:
    """The parts of one class, in order."""
    return [p for p in parts if isinstance(p, cls)]

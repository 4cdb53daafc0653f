"""A turn's saved state: the file ``run`` writes when it suspends a turn (or at turn start,
with ``--approve`` or ``--state``), which ``continue``, ``cancel``, ``answer`` and ``say`` read.
It is a :class:`~bridge_client.TurnState` plus the sandbox the turn runs in.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional, Tuple

from ..state_dir import identity
from ..paths import user_home
from ..wire.parts import TurnState
from .exits import UsageError

__all__ = ["SANDBOX_KEY", "AGENT_KEY", "state_record", "save_turn_state", "read_turn_state", "read_state",
           "recorded_agent"]

SANDBOX_KEY = "sandbox"
"""What a saved turn state adds to TurnState's fields: the sandbox the turn runs in."""

AGENT_KEY = "agent"
"""And, for a turn of your own driver, its ``MODULE:CALLABLE`` (the state names only its id)."""


def state_record(state: TurnState, sandbox_label: str, agent: Optional[str] = None) -> Dict[str, Any]:
    """The JSON object of a saved turn state: the TurnState's fields, the sandbox, and the
    ``--agent`` when it is a ``MODULE:CALLABLE`` driver (a built-in one is named by its id)."""
    record = dict(state.to_dict(), **{SANDBOX_KEY: sandbox_label})
    if agent and ":" in agent:
        record[AGENT_KEY] = agent
    return record


def recorded_agent(path: str) -> Optional[str]:
    """The ``MODULE:CALLABLE`` a saved turn state names (``None``: none, or not readable)."""
    try:
        with open(path, "rb") as f:
            record = json.loads(f.readline(4 * 1024 * 1024 + 65536))
    except (OSError, ValueError, RecursionError):
        return None
    agent = record.get(AGENT_KEY) if isinstance(record, dict) else None
    return agent if isinstance(agent, str) and ":" in agent else None


def save_turn_state(state: TurnState, sandbox_label: str, agent: Optional[str] = None) -> str:
    """Write the turn state, plus the sandbox it runs in (and a ``MODULE:CALLABLE`` agent), to
    ``<user_home>/turns/<turn id>.json`` (mode 0600); return the path. The extra keys are
    ignored by :meth:`TurnState.from_json`."""
    folder = os.path.join(user_home(), "turns")
    path = os.path.join(folder, f"{state.turn_id}.json")
    record = state_record(state, sandbox_label, agent)
    identity.secure_write(path, json.dumps(record, ensure_ascii=False).encode())
    return path


def read_turn_state(path: str) -> Tuple[TurnState, Optional[str]]:
    """Read a saved turn state; return it and the sandbox it was saved with (``None`` for a
    file without one, such as a plain ``TurnState.to_json()``)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        record = json.loads(raw)
        state = TurnState.from_dict(record)
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"{path} is not a turn state: {exc}") from None
    recorded = record.get(SANDBOX_KEY) if isinstance(record, dict) else None
    return state, recorded if isinstance(recorded, str) and recorded else None


def read_state(path: str) -> Tuple[TurnState, Optional[str]]:
    """The turn state in ``path`` and the sandbox it names (``None`` when it names none): a
    saved turn state, or a ``turn-start`` part (one JSON line of ``run --json``, the first
    line of a file of them).

    Raises:
        UsageError: the file cannot be read or holds neither.
    """
    try:
        with open(path, "rb") as f:
            first = f.readline(4 * 1024 * 1024 + 65536)
    except OSError as exc:
        raise UsageError(
            f"cannot read {path}: {exc.strerror or exc} (this takes a turn state file: the one a "
            f"suspended run printed, under {os.path.join(user_home(), 'turns')}, or a --state FILE)"
        ) from None
    try:
        record = json.loads(first)
    except ValueError:
        record = None
    turn = record.get("turn") if isinstance(record, dict) and record.get("type") == "turn-start" else None
    if isinstance(turn, dict):
        try:
            return TurnState.from_dict(turn), None
        except ValueError as exc:
            raise UsageError(f"{path} is not a turn state: {exc}") from None
    return read_turn_state(path)

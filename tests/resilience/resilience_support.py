"""Helpers for the resilience suite: find and SIGKILL a bridge by the pid in its listening
file, and check a turn's parts against the promises of C09 and C13."""
from __future__ import annotations

import json
import os
import signal
from typing import Any, Callable, Dict, List, Optional

import bridge_client as bc
from bridge_client.state_dir import identity
from host_support import _alive, wait_until


def bridge_pid(sandbox: Any, bridge_id: str) -> Optional[int]:
    """The pid in the bridge's listening file, or ``None`` when there is no file."""
    path = os.path.join(identity.state_dir(sandbox.state_root, bridge_id), identity.LISTENING_FILE)
    try:
        with open(path, "rb") as f:
            return int(json.loads(f.read())["pid"])
    except (OSError, ValueError, KeyError):
        return None


def sigkill_bridge(sandbox: Any, bridge_id: str) -> int:
    """SIGKILL the bridge named by its listening file and wait until it is gone; return its pid.

    The listening file stays behind, as after a real crash."""
    pid = bridge_pid(sandbox, bridge_id)
    assert pid is not None, "the bridge has no listening file"
    os.kill(pid, signal.SIGKILL)
    assert wait_until(lambda: not _alive(pid), timeout=10.0), f"bridge {pid} survived SIGKILL"
    return pid


def read_killing_at(
    turn: bc.Turn, kill: Callable[[], Any], at: Callable[[bc.Part, int], bool]
) -> List[bc.Part]:
    """Read ``turn`` to its end, calling ``kill()`` once, right after the first part for
    which ``at(part, position)`` is true (position: how many parts were read before it)."""
    parts: List[bc.Part] = []
    killed = False
    for part in turn:
        parts.append(part)
        if not killed and at(part, len(parts) - 1):
            kill()
            killed = True
    assert killed, "the kill point was never reached"
    return parts


def check_turn(parts: List[bc.Part], *, steps: int, first_step: int = 0) -> Dict[int, int]:
    """Assert what C09/C13 promise of one turn's parts, and return ``{step: final attempt}``.

    - ``turn-start`` first, ``turn-finish`` (``stop``) last, each once;
    - offsets strictly increase: no part repeated, none out of order;
    - every step from ``first_step`` completes exactly once, in order (no complete step
      repeated);
    - a step delivered again comes after a ``step-reset`` of its earlier attempt, with a
      higher ``attempt``.
    """
    assert parts[0].type == "turn-start", parts[0]
    assert parts[-1].type == "turn-finish" and parts[-1].finish_reason == "stop", parts[-1]
    assert sum(p.type == "turn-start" for p in parts) == 1
    assert sum(p.type == "turn-finish" for p in parts) == 1
    indexes = [p.index for p in parts]
    assert all(a < b for a, b in zip(indexes, indexes[1:])), f"offsets not strictly increasing: {indexes}"
    finished = [p.step for p in parts if isinstance(p, bc.StepFinish)]
    assert finished == list(range(first_step, steps)), f"complete steps: {finished}"
    open_attempt: Dict[int, int] = {}
    final: Dict[int, int] = {}
    for p in parts:
        if isinstance(p, bc.StepStart):
            previous = open_attempt.get(p.step)
            if previous is not None:
                raise AssertionError(
                    f"step {p.step} started again (attempt {p.attempt}) without a step-reset"
                )
            if p.step in final:
                assert p.attempt > final[p.step], f"step {p.step}: attempt {p.attempt} after {final[p.step]}"
            open_attempt[p.step] = p.attempt
            final[p.step] = p.attempt
        elif isinstance(p, bc.StepReset):
            assert open_attempt.get(p.step) in (p.discarded_attempt, None)
            open_attempt.pop(p.step, None)
        elif isinstance(p, bc.StepFinish):
            assert open_attempt.pop(p.step) == p.attempt
    return final


def echo_text(prompt: str, steps: int) -> str:
    """What an undisturbed echo turn of ``steps`` steps says."""
    return prompt * steps

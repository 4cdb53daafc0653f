"""The process groups of an agent CLI's tools, for a cancel: a tool an agent CLI runs in a
session of its own (pi does) is not reached by a signal to the CLI's process group, and would
outlive the CLI's exit. :func:`with_tools` notes those groups when the cancel interrupts the
CLI; :func:`kill_groups` ends them once the CLI is done."""
from __future__ import annotations

import os
import signal
from typing import Callable, Dict, Set

__all__ = ["with_tools", "descendant_groups", "kill_groups"]


def with_tools(pid: int, interrupt: Callable[[], object], groups: Set[int]) -> Callable[[], object]:
    """``interrupt``, which first adds to ``groups`` the process groups of the descendants of
    ``pid`` (the CLI, its group's leader) outside its own group (:func:`descendant_groups`)."""

    def run() -> object:
        groups.update(descendant_groups(pid))
        return interrupt()

    return run


def descendant_groups(pid: int) -> Set[int]:
    """The process groups of ``pid``'s descendants (read from ``/proc``), other than ``pid``'s
    own group and this process's; empty when ``pid`` is gone or has none."""
    parent: Dict[int, int] = {}
    group: Dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    rest = f.read().rsplit(")", 1)[1].split()
                parent[int(entry)], group[int(entry)] = int(rest[1]), int(rest[2])
            except (OSError, ValueError, IndexError):
                pass
    found = {pid}
    grew = True
    while grew:
        grew = False
        for p, pp in parent.items():
            if pp in found and p not in found:
                found.add(p)
                grew = True
    return {group[p] for p in found if p in group and group[p] != pid} - {os.getpgrp()}


def kill_groups(groups: Set[int]) -> None:
    """SIGKILL each process group of ``groups`` (a gone one is skipped)."""
    for g in groups:
        try:
            os.killpg(g, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

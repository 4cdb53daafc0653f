"""Fixtures for the real-agent driver tests: a private home, a workspace, cleanup of every
process working in it (by pid, never by name), and fake ``claude``/``codex`` programs first on
PATH. The host test helpers (``host_support``) are shared with tests/host."""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, List

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


class FakeCLI:
    """The fake programs' folder: write scenarios, read the calls they got."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def play(self, program: str, *runs: Dict[str, Any]) -> None:
        path = os.path.join(self.folder, "scenario.json")
        data = json.load(open(path)) if os.path.exists(path) else {}
        data[program] = list(runs)
        with open(path, "w") as f:
            json.dump(data, f)

    def calls(self, program: str) -> List[Dict[str, Any]]:
        path = os.path.join(self.folder, "calls.jsonl")
        if not os.path.exists(path):
            return []
        with open(path) as f:
            rows = [json.loads(line) for line in f]
        return [r for r in rows if r["program"] == program and r["argv"] != ["<interrupt>"]]

    def interrupts(self) -> int:
        path = os.path.join(self.folder, "calls.jsonl")
        with open(path) as f:
            return sum(1 for line in f if json.loads(line)["argv"] == ["<interrupt>"])


@pytest.fixture
def fake_cli(tmp_path, monkeypatch) -> FakeCLI:
    """``bin/claude`` and ``bin/codex`` first on PATH, playing what the test writes."""
    folder = tmp_path / "fake"
    (folder / "bin").mkdir(parents=True)
    for program in ("claude", "codex"):
        path = folder / "bin" / program
        path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{HERE}/fake_cli.py" {program} "$@"\n')
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_CLI_DIR", str(folder))
    return FakeCLI(str(folder))

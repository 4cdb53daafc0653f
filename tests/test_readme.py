"""The README keeps exactly two set-up commands, and CI runs the test command as written."""
from __future__ import annotations

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _commands():
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    setup = text.split("## Set up", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", setup, re.S)]


def test_readme_has_exactly_two_setup_commands_one_line_each():
    commands = _commands()
    assert len(commands) == 2
    assert all("\n" not in c for c in commands)
    assert "bridge-client run" in commands[0] and "pytest" in commands[1]


def test_ci_runs_the_readme_test_command_as_written():
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        ci = f.read()
    assert _commands()[1] in ci.splitlines()

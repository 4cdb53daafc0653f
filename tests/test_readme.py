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


def _ci_lines():
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        return [line.strip() for line in f if line.strip() and not line.lstrip().startswith("#")]


def test_ci_sets_nothing_up_before_the_readme_command():
    # The README's command must pass by itself on a fresh machine: CI may not prepare
    # anything for it (npm packages, a Docker engine); the tests do that themselves.
    lines = _ci_lines()
    before = lines[: lines.index(_commands()[1])]
    assert all(line.startswith(("set ", "cd ")) for line in before), before


def test_ci_runs_the_type_check_lint_and_nitpicky_docs_after_the_tests():
    lines = _ci_lines()
    after = lines[lines.index(_commands()[1]) + 1:]
    assert "mypy --strict bridge_client" in after
    assert "ruff check ." in after
    assert any(line.startswith("sphinx-build") and " -n " in line and " -W " in line for line in after)


def test_readme_says_how_long_the_suite_takes():
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    assert re.search(r"The suite takes about \d+ minutes", text)


def test_readme_works_on_a_package_index():
    # The long description: no relative links (docs/ paths do not exist once installed).
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    links = re.findall(r"\]\(([^)]+)\)", text)
    assert all(link.startswith("https://") for link in links), links
    assert not re.search(r"`docs/[\w./-]+\.md`", text)


def test_the_quick_subset_the_readme_names_is_the_top_level_test_modules():
    """``-m quick`` (a marker, not ``-k``, which matches names: ``-k cli`` takes ``client``
    too) selects tests/ itself and leaves the folders below it to the full suite."""
    import subprocess
    import sys

    with open(os.path.join(ROOT, "README.md")) as f:
        assert "python -m pytest -m quick" in f.read()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "quick", "--collect-only", "-q", "-n", "0",
         "-p", "no:cacheprovider"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    ids = [line for line in done.stdout.splitlines() if "::" in line]
    assert len(ids) > 1000, done.stdout[-2000:]
    below = [line for line in ids if "/" in line.split("::")[0][len("tests/"):]]
    assert not below and all(line.startswith("tests/test_") for line in ids), below[:3]
    assert not any(line.startswith("tests/test_benchmarks_smoke.py") for line in ids)

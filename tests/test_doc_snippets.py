"""The Python snippets of the guides as a user pastes them: each
compiles, and the self-contained ones run as written, each in a fresh folder outside the
repository, against real bridges of this package. The web service page has its own test
(tests/host/test_services.py)."""
from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
import textwrap
from typing import Dict, List, Tuple

import pytest

pytestmark = pytest.mark.timeout(120)

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")


def _snippets() -> Dict[str, List[Tuple[int, str]]]:
    found: Dict[str, List[Tuple[int, str]]] = {}
    for path in sorted(glob.glob(os.path.join(DOCS, "**", "*.md"), recursive=True)):
        text = open(path, encoding="utf-8").read()
        for m in re.finditer(r"```python\n(.*?)```", text, re.S):
            name = os.path.relpath(path, DOCS)
            found.setdefault(name, []).append((text[: m.start()].count("\n") + 1, m.group(1)))
    return found


SNIPPETS = _snippets()


def _snippet(page: str, first_line: str) -> str:
    """The snippet of ``page`` whose first line starts with ``first_line``."""
    for _, code in SNIPPETS[page]:
        if code.startswith(first_line):
            return code
    raise AssertionError(f"{page} has no snippet starting {first_line!r}")


@pytest.mark.parametrize(
    "page,line,code", [(p, n, c) for p, items in SNIPPETS.items() for n, c in items],
    ids=lambda v: str(v)[:40] if isinstance(v, str) else str(v),
)
def test_every_python_snippet_compiles(page, line, code):
    # Fragments (a loop body, `workspace=...`) too: what a reader pastes must be Python.
    compile(textwrap.dedent(code), f"{page}:{line}", "exec")


def _run(code: str, folder: str, stdin: str = "") -> subprocess.CompletedProcess:
    script = os.path.join(folder, "snippet.py")
    with open(script, "w", encoding="utf-8") as f:
        f.write(code)
    return subprocess.run([sys.executable, script], cwd=folder, input=stdin, capture_output=True,
                          text=True, timeout=100, env=dict(os.environ))


@pytest.mark.parametrize("page,first", [
    ("index.md", "import bridge_client as bc\n\nwith bc.create_session"),
    ("quickstart.md", "import bridge_client as bc\n\nwith bc.create_session"),
    ("quickstart.md", "import bridge_client as bc\n\nsandbox = bc.LocalSandbox"),
])
def test_a_first_script_runs_as_written(page, first, workspace):
    done = _run(_snippet(page, first), workspace)
    assert done.returncode == 0, done.stderr
    assert "TurnFinish" in done.stdout or "finished:" in done.stdout, done.stdout


def test_the_driver_guide_runs_as_written(workspace):
    # upper_agent.py in the sandbox folder, then the host script beside it.
    with open(os.path.join(workspace, "upper_agent.py"), "w", encoding="utf-8") as f:
        f.write(_snippet("writing-a-driver.md", "# upper_agent.py"))
    done = _run(_snippet("writing-a-driver.md", "import bridge_client as bc"), workspace)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-2:] == ["HELLO", "WORLD"], done.stdout


def test_the_interactive_guide_asks_and_answers_as_written(workspace):
    repo = os.path.join(workspace, "repo")
    os.mkdir(repo)
    with open(os.path.join(repo, "Makefile"), "w") as f:
        f.write("clean:\n\t@echo cleaning > cleaned.txt\nall:\n\t@echo building\n")
    done = _run(_snippet("interactive.md", "import bridge_client as bc"), workspace, stdin="y\nn\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("allow? [y/n/a]") == 2, done.stdout
    assert "shell: make clean" in done.stdout and os.path.exists(os.path.join(repo, "cleaned.txt"))

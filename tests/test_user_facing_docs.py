"""What a user of the installed package reads (``help()``, the API page, ``--help``) says what
happens in plain words: no contract rule ids (C09, B05: they belong in docs/contract.md and in
test names) and no ``docs/*.md`` paths (they do not exist once installed; docstrings link a
page by its Sphinx name, such as :doc:`protocol`).

Public docstrings are read from the source (module, public classes, functions, methods and
documented attributes), so a module constant's docstring counts too. Every module under
``bridge_client`` is checked."""
from __future__ import annotations

import ast
import os
import re

import pytest

from bridge_client import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PACKAGE = os.path.join(ROOT, "bridge_client")

# Every module of the package, found by walking it: a new module is checked without being listed.
MODULES = sorted(
    os.path.relpath(os.path.join(folder, name), ROOT).replace(os.sep, "/")
    for folder, _, names in os.walk(PACKAGE)
    if "__pycache__" not in folder
    for name in names
    if name.endswith(".py")
)

RULE_ID = re.compile(r"\b[BC]\d{2}\b")
DOCS_PATH = re.compile(r"\bdocs/[\w./-]*|\b[\w-]+\.md\b")


def _public_docstrings(tree: ast.Module):
    """``(name, docstring)`` for the module and everything public in it."""
    if ast.get_docstring(tree):
        yield "<module>", ast.get_docstring(tree)

    def walk(body, prefix):
        previous = None
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if not node.name.startswith("_") or node.name in ("__init__", "__call__"):
                    doc = ast.get_docstring(node)
                    if doc:
                        yield f"{prefix}{node.name}", doc
                    if isinstance(node, ast.ClassDef):
                        yield from walk(node.body, f"{prefix}{node.name}.")
            # An attribute docstring: a string right after a public assignment.
            elif (
                isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str) and previous is not None
            ):
                yield f"{prefix}{previous}", node.value.value
            previous = None
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = [t.id for t in targets if isinstance(t, ast.Name)]
                if names and not names[0].startswith("_"):
                    previous = names[0]

    yield from walk(tree.body, "")


def _offences(text: str):
    return RULE_ID.findall(text) + DOCS_PATH.findall(text)


def test_every_module_of_the_package_is_checked():
    assert len(MODULES) > 50
    for path in (
        "bridge_client/__init__.py",
        "bridge_client/bridge/__main__.py",
        "bridge_client/bridge/driver.py",
        "bridge_client/client/connection.py",
        "bridge_client/drivers/shell.py",
        "bridge_client/sandbox/docker.py",
        "bridge_client/wire/frames.py",
    ):
        assert path in MODULES


@pytest.mark.parametrize("path", MODULES)
def test_public_docstrings_name_no_rule_ids_and_no_docs_paths(path):
    with open(os.path.join(ROOT, path)) as f:
        tree = ast.parse(f.read())
    found = {name: _offences(doc) for name, doc in _public_docstrings(tree) if _offences(doc)}
    assert not found, f"{path}: {found}"


def _parsers(parser):
    yield parser.prog, parser
    for action in parser._actions:
        for sub in (getattr(action, "choices", None) or {}).values():
            if hasattr(sub, "format_help"):
                yield from _parsers(sub)


def test_help_of_every_command_names_no_rule_ids_and_no_docs_paths():
    seen = []
    for prog, parser in _parsers(cli.build_parser()):
        seen.append(prog)
        text = parser.format_help()
        assert not _offences(text), f"{prog} --help: {_offences(text)}"
    for command in ("run", "continue", "cancel", "bridges", "stop", "prune"):
        assert f"bridge-client {command}" in seen


def test_the_check_finds_what_it_looks_for():
    source = (
        '"""Mod (C09)."""\nX = 1\n"""See docs/cli.md."""\n'
        'class A:\n    def f(self):\n        """B05."""\n'
    )
    tree = ast.parse(source)
    found = dict(_public_docstrings(tree))
    assert set(found) == {"<module>", "X", "A.f"}
    assert all(_offences(doc) for doc in found.values())


def _rule_ids_in_source(text: str):
    """``(line number, rule id)`` for every rule id in a module's source: docstrings private or
    public, log and error messages, and comments alike (a message or a traceback shows them to
    a user who cannot look them up)."""
    return [(n, m) for n, line in enumerate(text.splitlines(), 1) for m in RULE_ID.findall(line)]


@pytest.mark.parametrize("path", MODULES)
def test_no_rule_id_anywhere_in_the_package_source(path):
    with open(os.path.join(ROOT, path)) as f:
        found = _rule_ids_in_source(f.read())
    assert not found, f"{path}: say the rule in plain words, not by its id: {found}"


def test_the_source_check_finds_a_rule_id_in_a_comment_and_a_message():
    source = 'x = 1  # as before (C11)\nlog.info("idle (B06)")\nB2B = "B100 C1"\n'
    assert _rule_ids_in_source(source) == [(1, "C11"), (2, "B06")]


def test_the_request_ids_the_cli_guide_shows_have_the_bridge_s_shape():
    """The bridge names a request ``<step>.<attempt>.<n>-<8 hex>`` (bridge/approvals.py); the
    guide's examples look the same, so a reader can tell one in their own output."""
    with open(os.path.join(ROOT, "docs", "cli.md"), encoding="utf-8") as f:
        text = f.read()
    shown = re.findall(r"\[(?:approval|allowed|denied)\][^\n]*?(?:request )?(\S+\.\S+)(?:\)| by)", text)
    shown += re.findall(r"bridge-client: request (\S+) was answered", text)
    assert len(shown) >= 3, shown
    bad = [i for i in shown if not re.fullmatch(r"\d+\.\d+\.\d+-[0-9a-f]{8}", i)]
    assert not bad, f"docs/cli.md shows request ids the bridge never makes: {bad}"

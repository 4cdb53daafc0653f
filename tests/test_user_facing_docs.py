"""What a user of the installed package reads (``help()``, the API page, ``--help``) says what
happens in plain words: no contract rule ids (C09, B05: they belong in docs/contract.md and in
test names) and no ``docs/*.md`` paths (they do not exist once installed; docstrings link a
page by its Sphinx name, such as :doc:`protocol`).

Public docstrings are read from the source (module, public classes, functions, methods and
documented attributes), so a module constant's docstring counts too. ``SWEPT`` lists the
modules checked so far; the remaining ones join it as they are swept."""
from __future__ import annotations

import ast
import os
import re

import pytest

from bridge_client import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SWEPT = (
    "bridge_client/__init__.py",
    "bridge_client/agent.py",
    "bridge_client/cli.py",
    "bridge_client/cli_bridges.py",
    "bridge_client/cli_cancel.py",
    "bridge_client/cli_input.py",
    "bridge_client/cli_prune.py",
    "bridge_client/errors.py",
    "bridge_client/options.py",
    "bridge_client/redacted.py",
    "bridge_client/template.py",
    "bridge_client/client/session.py",
    "bridge_client/client/turn.py",
    "bridge_client/sandbox/base.py",
    "bridge_client/sandbox/docker_remote.py",
    "bridge_client/sandbox/installed_wheel.py",
    "bridge_client/sandbox/local.py",
    "bridge_client/sandbox/ssh.py",
    "bridge_client/sandbox/ssh_files.py",
    "bridge_client/sandbox/ssh_forward.py",
    "bridge_client/sandbox/ssh_link.py",
    "bridge_client/sandbox/ssh_scripts.py",
    "bridge_client/sandbox/urls.py",
    "bridge_client/sandbox/wheelhouse.py",
    "bridge_client/wire/__init__.py",
    "bridge_client/wire/frames.py",
    "bridge_client/wire/parts.py",
    "bridge_client/wire/rpcs.py",
    "bridge_client/wire/upgrade.py",
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


@pytest.mark.parametrize("path", SWEPT)
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

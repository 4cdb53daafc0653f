"""The package's shape, from its own source (docs/architecture.md): no import cycle among
``bridge_client`` modules (imports inside functions and under ``TYPE_CHECKING`` count, so
every arrow points down) and no module over 500 lines."""
from __future__ import annotations

import ast
import os
import sys
from typing import Dict, FrozenSet, List, Set

import bridge_client

ROOT = os.path.dirname(bridge_client.__file__)
LIMIT = 500

def _modules() -> Dict[str, str]:
    found = {}
    for folder, _, files in os.walk(ROOT):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, os.path.dirname(ROOT))[:-3].replace(os.sep, ".")
                found[rel[: -len(".__init__")] if rel.endswith(".__init__") else rel] = path
    return found


def _imports(module: str, path: str, modules: Dict[str, str]) -> Set[str]:
    is_package = path.endswith("__init__.py")
    here = module.split(".") if is_package else module.split(".")[:-1]
    targets: List[str] = []
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
        if isinstance(node, ast.Import):
            targets.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:  # `from . import x` may name a module
                targets.append(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    out = set()
    for target in targets:
        while target and target not in modules and "." in target:
            target = target.rsplit(".", 1)[0]
        # A package's own __init__ runs before its modules anyway: not a cycle partner.
        if target in modules and target != module and not module.startswith(target + "."):
            out.add(target)
    return out


def _cycles(graph: Dict[str, Set[str]]) -> Set[FrozenSet[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: Set[FrozenSet[str]] = set()
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.add(frozenset(component))
    return found


def test_no_import_cycle_among_the_package_modules():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    cycles = sorted(sorted(c) for c in _cycles(graph))
    assert not cycles, f"import cycles (every arrow must point down the layers): {cycles}"


def test_no_module_over_500_lines():
    over = {}
    for name, path in _modules().items():
        with open(path, encoding="utf-8") as f:
            lines = sum(1 for _ in f)
        if lines > LIMIT:
            over[name] = lines
    assert not over, f"modules over {LIMIT} lines (split them by concept): {over}"


def test_the_finder_sees_an_import_inside_a_function(tmp_path, monkeypatch):
    """An import in a function body is an arrow too: a cycle through one is found."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .a import x\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", str(pkg))
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert _cycles(graph) == {frozenset({"pkg.a", "pkg.b"})}


def test_the_cycle_finder_finds_a_cycle():
    """The finder itself: a graph with one cycle and a tail."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == {frozenset("abc")}


PROGRAM = frozenset({"bridge_client.bridge.__main__"})
"""The bridge program: it hands the bridge the built-in drivers' registry."""


def _arrows_into(source_prefixes: tuple, target: str, exempt: FrozenSet[str] = frozenset()) -> List[str]:
    """Every ``module -> imported module`` arrow from a module under one of
    ``source_prefixes`` (or any module, for ``()``) into the package ``target``."""
    modules = _modules()
    found = []
    for name, path in sorted(modules.items()):
        inside = name == target or name.startswith(target + ".")
        if name in exempt or (source_prefixes and not name.startswith(source_prefixes)):
            continue
        if not source_prefixes and (inside or name.startswith("bridge_client.drivers")):
            continue
        for imported in sorted(_imports(name, path, modules)):
            if imported == target or imported.startswith(target + "."):
                found.append(f"{name} -> {imported}")
    return found


def test_the_host_imports_nothing_from_the_bridge_package():
    """The host (client/, cli/, sandbox/, the top-level modules) and the layers below it
    (wire/, state_dir/) import nothing from bridge/: what host and bridge share about the state
    directory lives in state_dir/. Only the drivers, which run in the bridge, import it."""
    arrows = _arrows_into((), "bridge_client.bridge")
    assert not arrows, f"modules outside bridge/ and drivers/ import the bridge package: {arrows}"


def test_the_bridge_imports_no_driver_but_through_the_registry_it_is_given():
    """bridge/ makes its driver from the registry its program hands it (``builtin_drivers``
    in bridge/__main__.py, which nothing imports): no other bridge module imports drivers/."""
    arrows = _arrows_into(("bridge_client.bridge.",), "bridge_client.drivers", PROGRAM)
    assert not arrows, f"bridge/ imports drivers/ directly: {arrows}"


def test_the_layer_checks_see_an_arrow_into_the_bridge(tmp_path, monkeypatch):
    """The checks themselves: a host module and a bridge module that reach across are found."""
    pkg = tmp_path / "bridge_client"
    for folder in ("bridge", "drivers", "client"):
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "client" / "finder.py").write_text("def f():\n    from ..bridge import identity\n")
    (pkg / "bridge" / "identity.py").write_text("")
    (pkg / "bridge" / "launch.py").write_text("from ..drivers import BUILTIN_DRIVERS\n")
    (pkg / "bridge" / "__main__.py").write_text("from .. import drivers\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", str(pkg))
    assert _arrows_into((), "bridge_client.bridge") == [
        "bridge_client.client.finder -> bridge_client.bridge.identity"
    ]
    assert _arrows_into(("bridge_client.bridge.",), "bridge_client.drivers", PROGRAM) == [
        "bridge_client.bridge.launch -> bridge_client.drivers"
    ]

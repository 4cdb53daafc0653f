"""Sphinx configuration for the bridge-client docs.

Build (nitpicky, warnings are errors, as in CI)::

    pip install -e '.[docs]'
    sphinx-build -n -W --keep-going -b html docs docs/_build/html

Pages are Markdown (MyST, through myst-nb, which also renders the example notebook with the
outputs it was saved with; it is never executed here: tests/ runs it). The API reference is
generated from the docstrings (autodoc, Google style through napoleon).
"""
from __future__ import annotations

import logging
import os
import sys
from typing import Any, Dict

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

import bridge_client  # noqa: E402  (after the path is set)

project = "bridge-client"
author = "bridge-client contributors"
copyright = "bridge-client contributors"
release = bridge_client.__version__
version = release

extensions = [
    "myst_nb",  # MyST Markdown pages and .ipynb notebooks
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "sphinx.ext.intersphinx",
]

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints", "jupyter_execute"]

# MyST: heading anchors for links like [x](concepts.md#offsets); ::: fences; definition lists.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist"]

# Notebooks are shown as saved: the notebook test executes them, the docs build never does.
nb_execution_mode = "off"

# Docstrings are Google style (Args:, Returns:, Raises:, Attributes:).
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True  # "Attributes:" as fields, not as duplicate attribute entries
autodoc_member_order = "bysource"
autodoc_typehints = "description"
# Types only where the docstring documents the parameter: no bare "id (str)" lists.
autodoc_typehints_description_target = "documented_params"
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_preserve_defaults = True

# --- Links to the standard library (intersphinx), offline. The build cannot fetch Python's
# objects.inv (the docs are built where only package registries are reachable), so the
# inventory is generated here from the running interpreter: an entry per module below and per
# public class, exception and function in it (plus the builtins), pointing at the page and
# anchor docs.python.org gives it (``library/<module>.html#<module>.<name>``).
_PY_DOCS = "https://docs.python.org/3"
_STDLIB = (
    "os", "os.path", "io", "sys", "signal", "subprocess", "threading", "socket", "ssl", "select",
    "json", "logging", "datetime", "time", "typing", "dataclasses", "enum", "pathlib", "tempfile",
    "shutil", "contextlib", "collections", "collections.abc", "concurrent.futures", "queue",
    "urllib.parse", "urllib.request", "http", "http.client", "tarfile", "zipfile", "sqlite3",
    "hashlib", "hmac", "secrets", "uuid", "argparse", "wsgiref", "wsgiref.simple_server",
)
_STDTYPES = ("str", "bytes", "bytearray", "dict", "list", "tuple", "set", "frozenset", "memoryview", "range")
_BUILTIN_PAGES = {name: "stdtypes" for name in _STDTYPES}


def _stdlib_inventory(path: str) -> str:
    import builtins
    import importlib
    import inspect
    import zlib

    lines = []
    for name in dir(builtins):
        value = getattr(builtins, name)
        if name.startswith("_"):
            continue
        if inspect.isclass(value) and issubclass(value, BaseException):
            lines.append(f"{name} py:exception 1 library/exceptions.html#$ -")
        elif inspect.isclass(value):
            lines.append(f"{name} py:class 1 library/{_BUILTIN_PAGES.get(name, 'functions')}.html#$ -")
        elif callable(value):
            lines.append(f"{name} py:function 1 library/functions.html#$ -")
    lines += [f"{name} py:data 1 library/constants.html#$ -" for name in ("None", "True", "False")]
    for module_name in _STDLIB:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        page = f"library/{module_name}.html"
        lines.append(f"{module_name} py:module 1 {page}#module-$ -")
        own = {a for a in dir(module) if getattr(getattr(module, a), "__module__", None) == module_name}
        for attr in sorted(set(getattr(module, "__all__", None) or ()) | own):
            if attr.startswith("_"):
                continue
            value = getattr(module, attr, None)
            full = f"{module_name}.{attr}"
            if inspect.isclass(value):
                role = "exception" if issubclass(value, BaseException) else "class"
                lines.append(f"{full} py:{role} 1 {page}#$ -")
                for member, member_value in vars(value).items():
                    if not member.startswith("_") and callable(member_value):
                        lines.append(f"{full}.{member} py:method 1 {page}#$ -")
            elif inspect.isfunction(value) or inspect.isbuiltin(value):
                lines.append(f"{full} py:function 1 {page}#$ -")
            elif module_name == "typing":
                lines.append(f"{full} py:data 1 {page}#$ -")
    header = (
        "# Sphinx inventory version 2\n# Project: Python\n# Version: 3\n"
        "# The remainder of this file is compressed using zlib.\n"
    )
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(header.encode() + zlib.compress(("\n".join(lines) + "\n").encode()))
    return path


_INVENTORY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_build", "python-objects.inv")
intersphinx_mapping = {"python": (_PY_DOCS, _stdlib_inventory(_INVENTORY))}

html_theme = "furo"
html_title = f"bridge-client {release}"

# The toctree names pages other work adds later by pattern (protocol*, drivers/*, notebook*):
# a pattern that matches nothing yet is expected, not an error. Sphinx 9 logs that warning
# without a type, so suppress_warnings cannot reach it; a filter on the one logger that emits
# it drops exactly that message and nothing else.
# A code block that its lexer cannot read (a JSON transcript with arrows) is shown plain:
# cosmetic, not an error in the docs.
suppress_warnings = ["toc.empty_glob", "misc.highlighting_failure"]


class _EmptyGlobFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "didn't match any documents" not in str(record.msg)


_ROLES = ("class", "exc", "func", "meth", "attr", "data", "obj", "mod")


def _public_alias(app: Any, env: Any, node: Any, contnode: Any) -> Any:
    """Resolve ``bridge_client.sub.module.Name`` (and a bare ``Name`` or ``Class.method``) to
    the name the API page documents it under, ``bridge_client.Name``: the same object,
    re-exported by the package."""
    target = str(node.get("reftarget", ""))
    if node.get("refdomain") != "py" or not target:
        return None
    parts = target.split(".")
    candidates = []
    if parts[0] != "bridge_client":
        candidates.append("bridge_client." + target)
    else:
        candidates += ["bridge_client." + parts[-1], "bridge_client." + ".".join(parts[-2:])]
    domain = env.get_domain("py")
    if len(parts) == 1:  # a bare name: the one documented object of the package that has it
        owners = [n for n in domain.objects if n.startswith("bridge_client.") and n.endswith("." + target)]
        if len(owners) == 1:
            candidates.append(owners[0])
    for candidate in candidates:
        for role in _ROLES:
            found = domain.resolve_xref(env, node["refdoc"], app.builder, role, candidate, node, contnode)
            if found is not None:
                return found
    return None


def _public_bases(app: Any, name: str, obj: Any, options: Any, bases: list) -> None:
    """Show public bases only: a private helper base (``_Value``) is not documented."""
    bases[:] = [b for b in bases if not getattr(b, "__name__", "").startswith("_")]


def setup(app: Any) -> Dict[str, Any]:
    logging.getLogger("sphinx.sphinx.directives.other").addFilter(_EmptyGlobFilter())
    app.connect("missing-reference", _public_alias)
    app.connect("autodoc-process-bases", _public_bases)
    return {"parallel_read_safe": True}

# Internal base classes that autodoc's "Bases:" line names but the API page does not document.
nitpick_ignore = [("py:class", "bridge_client.client.turn_source.TurnSource")]

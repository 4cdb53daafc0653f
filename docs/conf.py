"""Sphinx configuration for the bridge-client docs.

Build (warnings are errors, as in CI)::

    pip install -e '.[docs]'
    sphinx-build -W --keep-going -b html docs docs/_build/html

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


def setup(app: Any) -> Dict[str, Any]:
    logging.getLogger("sphinx.sphinx.directives.other").addFilter(_EmptyGlobFilter())
    return {"parallel_read_safe": True}

"""Write the conformance matrix of ``docs/agents.md`` from a recorded conformance run.

The run: ``BRIDGE_CLIENT_CONFORMANCE_JSON=tests/agents/conformance_run.json pytest
tests/agents/test_conformance.py -n 0`` (one driver at a time with ``-k "[vibe]"`` adds up
to the same file). Then::

    python -m tests.agents.conformance_matrix            # rewrite the page's section
    python -m tests.agents.conformance_matrix --check    # exit 1 when the page disagrees

The section sits between :data:`START` and :data:`END`; ``test_conformance_matrix.py``
fails when it is not :func:`render` of the committed record.
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any, Dict

HERE = os.path.dirname(os.path.abspath(__file__))
RECORD = os.path.join(HERE, "conformance_run.json")
PAGE = os.path.join(os.path.dirname(os.path.dirname(HERE)), "docs", "agents.md")
START = "<!-- conformance-matrix: written by tests/agents/conformance_matrix.py; do not edit -->"
END = "<!-- conformance-matrix: end -->"

AGENTS = ["claude-code", "codex", "gemini", "qwen", "pi", "opencode", "copilot", "codex-acp",
          "cline", "vibe", "aider"]
"""The eleven named agent drivers, in the matrix's order."""

SCENARIOS = {
    "text": "streamed text",
    "tool": "a tool writes a file in the sandbox",
    "approve": "approve a tool call",
    "deny": "deny a tool call",
    "steer": "a steering message (turn.say)",
    "cancel": "cancel while a tool runs",
    "sigkill": "bridge SIGKILL mid-turn, then continue (the tool ran once)",
    "env": "a per-session variable reaches the tool",
    "host-tool": "a host tool call",
    "restore": "restore into a new local sandbox (the agent remembers)",
}
"""Cell key to what the matrix's row says."""

RULES = {"text": "C09", "tool": "C02", "approve": "C18", "deny": "C18", "steer": "C18", "cancel": "C20",
         "sigkill": "B05, C24", "env": "C19", "host-tool": "C22", "restore": "C23"}


def cell_text(cell: Dict[str, Any]) -> str:
    """A cell as the matrix shows it: ``passed``, ``unsupported: `Error```, ``n/a``, ``not
    carried`` or ``failed``, with its note in brackets."""
    outcome = str(cell.get("outcome", "not run"))
    text = f"unsupported: `{cell.get('error')}`" if outcome == "unsupported" else outcome
    note = re.sub(r"\s+", " ", str(cell.get("note") or "")).strip().replace("|", "\\|")
    return f"{text} ({note})" if note else text


def render(record: Dict[str, Any]) -> str:
    """The page's section (from :data:`START` to :data:`END`) for ``record`` (the JSON the
    suite writes: ``{"agents": {driver: {"version", "cells": {key: cell}}}}``)."""
    agents = record.get("agents", {})
    lines = [START, "", "## Conformance matrix", ""]
    lines.append(
        "Each named agent driver ran its real CLI through the same scenarios of "
        "`tests/agents/test_conformance.py`, offline against the scripted model server "
        "(`tests/agents/model_server.py`). *passed*: the scenario's assertions held; "
        "*unsupported*: the driver refuses it with that typed error, as asserted; *n/a*: "
        "the scenario makes no sense for the agent; *not carried*: it runs, but what it "
        "proves does not hold yet (as asserted, with why); *failed*: the run's test failed. "
        "Written from `tests/agents/conformance_run.json` by "
        "`python -m tests.agents.conformance_matrix`."
    )
    lines += ["", "CLI versions of the run: " + ", ".join(
        f"{a} {agents.get(a, {}).get('version', 'not run')}" for a in AGENTS) + ".", ""]
    lines.append("| scenario (rule) | " + " | ".join(f"`{a}`" for a in AGENTS) + " |")
    lines.append("| --- |" + " --- |" * len(AGENTS))
    for key, title in SCENARIOS.items():
        row = [cell_text(agents.get(a, {}).get("cells", {}).get(key, {})) for a in AGENTS]
        lines.append(f"| {title} ({RULES[key]}) | " + " | ".join(row) + " |")
    lines += ["", END]
    return "\n".join(lines)


def written(page: str, record: Dict[str, Any]) -> str:
    """``page`` with its section replaced by :func:`render` of ``record`` (put after the
    page's first paragraph when it has none yet)."""
    section = render(record)
    if START in page and END in page:
        before, rest = page.split(START, 1)
        return before + section + rest.split(END, 1)[1]
    head, sep, tail = page.partition("\n\n## ")
    return f"{head}\n\n{section}\n{sep}{tail}" if sep else f"{page.rstrip()}\n\n{section}\n"


def main(argv: Any = None) -> int:
    """Rewrite the page (``--check``: only say whether it agrees; exit status 1 if not)."""
    args = list(sys.argv[1:] if argv is None else argv)
    with open(RECORD) as f:
        record = json.load(f)
    with open(PAGE) as f:
        page = f.read()
    new = written(page, record)
    if "--check" in args:
        if new != page:
            print(f"{PAGE} disagrees with {RECORD}: run python -m tests.agents.conformance_matrix")
            return 1
        return 0
    if new != page:
        with open(PAGE, "w") as f:
            f.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The matrix of docs/agents.md is the one the recorded conformance run gives
(``conformance_run.json``, written by ``test_conformance.py``; see ``conformance_matrix.py``);
the record has every named driver's every scenario and CLI version; and the CLI's ``--agent``
help names every built-in driver. No agent CLI runs here."""

from __future__ import annotations

import json

import conformance_matrix as matrix
from bridge_client.cli.arguments import AGENT_HELP
from bridge_client.driver_options import BUILTIN_DRIVER_NAMES

OUTCOMES = {"passed", "unsupported", "n/a", "not carried", "failed"}


def _record():
    with open(matrix.RECORD) as f:
        return json.load(f)


def test_the_agents_page_holds_the_matrix_of_the_recorded_conformance_run():
    with open(matrix.PAGE) as f:
        page = f.read()
    assert matrix.START in page and matrix.END in page, "docs/agents.md has no matrix section"
    assert matrix.written(page, _record()) == page, (
        "docs/agents.md disagrees with tests/agents/conformance_run.json: "
        "run python -m tests.agents.conformance_matrix"
    )


def test_the_record_has_every_named_driver_and_scenario_with_its_cli_version():
    agents = _record()["agents"]
    assert set(agents) == set(matrix.AGENTS)
    for name, entry in agents.items():
        assert entry["version"] not in ("", "unknown"), name
        assert set(entry["cells"]) == set(matrix.SCENARIOS), (name, sorted(entry["cells"]))
        for key, cell in entry["cells"].items():
            assert cell["outcome"] in OUTCOMES, (name, key, cell)
            assert cell["outcome"] != "unsupported" or cell["error"].endswith("Unsupported"), cell


def test_the_matrix_names_the_eleven_named_drivers():
    generic = {"echo", "shell", "openai", "acp"}
    assert set(BUILTIN_DRIVER_NAMES) - generic == set(matrix.AGENTS)


def test_the_agent_help_names_every_built_in_driver():
    lines = AGENT_HELP.splitlines()[1:]
    listed = {line.split()[0] for line in lines if line.startswith("  ") and line[2] != " "}
    missing = set(BUILTIN_DRIVER_NAMES) - listed
    assert not missing, f"--agent help lacks {sorted(missing)}"


def test_a_cell_that_differs_from_the_page_is_found():
    record = _record()
    with open(matrix.PAGE) as f:
        page = f.read()
    record["agents"]["aider"]["cells"]["text"] = {"outcome": "failed", "note": ""}
    assert matrix.written(page, record) != page

"""The example notebook (docs/notebook.ipynb), executed headless with nbclient and ipykernel
against a LocalSandbox and the echo agent: every cell runs, a Turn renders as HTML, and a
kernel interrupt during iteration stops the loop without ending the turn, which the next
cell reads to its end with nothing lost or repeated."""
from __future__ import annotations

import os
import re
import threading
import time

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
from jupyter_core.utils import run_sync  # noqa: E402  (installed with nbclient)

pytestmark = pytest.mark.timeout(120)

NOTEBOOK = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "docs", "notebook.ipynb")
STEPS = 20  # the slow turn's steps, as the notebook sets them


def _cells(nb):
    return {cell.get("id"): (index, cell) for index, cell in enumerate(nb.cells)}


def _text(cell):
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def _html(cell):
    shown = [o for o in cell.outputs if o.output_type in ("execute_result", "display_data")]
    return "".join(o["data"].get("text/html", "") for o in shown)


def _errors(cell):
    return [o.ename for o in cell.outputs if o.output_type == "error"]


def _interrupt_when(client, cell, predicate, sent, timeout=60.0):
    """In a helper thread: once ``predicate(cell)`` holds, interrupt the kernel the way
    Jupyter's Interrupt button does (the kernel manager's interrupt_kernel)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not predicate(cell):
        time.sleep(0.02)
    if predicate(cell):
        run_sync(client.km.interrupt_kernel)()
        sent.set()


def test_the_notebook_runs_renders_a_turn_and_survives_an_interrupt(workspace):
    with open(NOTEBOOK, encoding="utf-8") as f:
        nb = nbformat.read(f, as_version=4)
    cells = _cells(nb)
    client = nbclient.NotebookClient(
        nb, timeout=60, kernel_name="python3", resources={"metadata": {"path": workspace}}
    )
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            if cell.get("id") == "slow":
                sent = threading.Event()
                watcher = threading.Thread(
                    target=_interrupt_when,
                    args=(client, cell, lambda c: "2 steps done" in _text(c), sent),
                    name="test-interrupter",
                )
                watcher.start()
                try:
                    client.execute_cell(cell, index)
                finally:
                    watcher.join(timeout=70)
                assert sent.is_set(), "the interrupt was sent while the loop ran"
            else:
                client.execute_cell(cell, index)

    # The first turn ran and shows itself as HTML: finished, with its text.
    turn_types = _text(cells["turn"][1]).split()
    assert turn_types[0] == "turn-start" and turn_types[-1] == "turn-finish"
    shown = _html(cells["show"][1])
    assert "finished (stop), 2 steps" in shown and "Hello from a notebook." in shown

    # The interrupt ended the loop with KeyboardInterrupt, part way through the turn...
    slow = cells["slow"][1]
    assert _errors(slow) == ["KeyboardInterrupt"]
    done_lines = re.findall(r"(\d+) steps done", _text(slow))
    assert done_lines and int(done_lines[-1]) < STEPS, "interrupted before the turn finished"

    # ...and the next cell read the same turn on to its end: every step once, all the text.
    after = _text(cells["continue"][1])
    stopped = int(re.search(r"stopped after (\d+) steps; done: False", after).group(1))
    assert stopped == int(done_lines[-1])
    assert f"now {STEPS} steps; finished with 'stop'" in after
    final = _html(cells["continue"][1])
    assert f"finished (stop), {STEPS} steps" in final
    assert "A long answer, one step at a time. " * STEPS in final.replace("&#x27;", "'")
    assert not _errors(cells["cleanup"][1])

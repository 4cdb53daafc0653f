"""A Turn in IPython and Jupyter (issue 6, item 3): _repr_pretty_ and _repr_html_ show the
status and the text yielded so far, HTML-escaped, without reading from the bridge."""
from __future__ import annotations

import pytest

import bridge_client as bc
from host_support import options, session_options

pretty = pytest.importorskip("IPython.lib.pretty")
pytestmark = pytest.mark.timeout(60)


def test_a_turn_shows_its_status_and_text_so_far(sandbox):
    with bc.create_session(options("echo", agent_options={"steps": 2}), session_options(sandbox)) as session:
        turn = session.turn("<b>fish & chips</b> ")
        assert pretty.pretty(turn) == f"turn {turn.id}: not finished, 0 steps read"
        for part in turn:
            if part.type == "step-finish":
                break
        html = turn._repr_html_()
        assert "not finished, 1 step read" in html
        assert "&lt;b&gt;fish &amp; chips&lt;/b&gt;" in html and "<b>fish" not in html
        list(turn)
        expected = f"turn {turn.id}: finished (stop), 2 steps\n" + "<b>fish & chips</b> " * 2
        assert pretty.pretty(turn) == expected
        assert "finished (stop), 2 steps" in turn._repr_html_()


def test_a_failed_turn_shows_its_reason(sandbox):
    opts = options("echo", agent_options={"fail_at": 0})
    with bc.create_session(opts, session_options(sandbox)) as session:
        turn = session.turn("boom")
        list(turn)
        assert turn.finish.finish_reason == "error"
        assert pretty.pretty(turn).startswith(f"turn {turn.id}: finished (error: ")
        assert "#c44" in turn._repr_html_()

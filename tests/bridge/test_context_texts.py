"""TurnContext.texts(): several text deltas handed to the log at once, the same parts as
text() per string (issue 5's batched emit)."""
from __future__ import annotations

import json
import threading
from typing import Any, List

import pytest

from bridge_client.bridge import TurnContext
from bridge_client.bridge.store import Store
from bridge_client.bridge.turns import TurnManager
from bridge_client.wire.parts import SessionState

pytestmark = pytest.mark.timeout(60)


class _Driver:
    """Emits what ``plan`` says, in one step: ("text", s) or ("texts", [s, ...])."""

    def __init__(self, plan: List[Any]) -> None:
        self.plan = plan
        self.errors: List[BaseException] = []

    def run_turn(self, ctx: TurnContext) -> None:
        ctx.start_step()
        for how, value in self.plan:
            try:
                getattr(ctx, how)(value)
            except (TypeError, ValueError) as exc:
                self.errors.append(exc)
        ctx.finish_step()


def _run(tmp_path, plan):
    tmp_path.mkdir(exist_ok=True)
    store = Store(str(tmp_path / "s.sqlite3"))
    driver = _Driver(plan)
    manager = TurnManager(store, driver, agent_id="echo", bridge_id="b" * 32)
    manager.open_session("s", None)
    manager.start_turn("s", "t", "p")
    turn = manager.find_turn("s", "t")
    turn.wait_for_parts(10**9, lambda: False)
    parts = [json.loads(t) for t in turn.texts]
    manager.close()
    stored = [json.loads(p.text) for p in store.load_parts("t")]
    store.close()
    assert stored == parts  # what readers got is what the store keeps (B03)
    return parts, driver.errors


def _deltas(parts):
    return [(p["index"], p["step"], p["attempt"], p["text"]) for p in parts if p["type"] == "text-delta"]


def test_texts_gives_the_same_parts_as_text_per_string(tmp_path):
    chunks = ["a", "é\n", '"q"', "", "\u2028x"]
    one_by_one, _ = _run(tmp_path / "a", [("text", c) for c in chunks])
    batched, _ = _run(tmp_path / "b", [("texts", chunks), ("texts", [])])
    assert _deltas(batched) == _deltas(one_by_one)
    assert [d[3] for d in _deltas(batched)] == chunks
    assert [p["index"] for p in batched] == list(range(len(batched)))
    assert [p["type"] for p in batched] == [p["type"] for p in one_by_one]


def test_texts_with_a_bad_value_emits_nothing(tmp_path):
    parts, errors = _run(
        tmp_path,
        [("texts", "abc"), ("texts", ["ok", 3]), ("texts", ["ok", "\ud800"]), ("texts", ["kept"])],
    )
    assert [type(e) for e in errors] == [TypeError, TypeError, ValueError]
    assert [d[3] for d in _deltas(parts)] == ["kept"]


class _PlainSink:
    """A sink without emit_texts: texts() falls back to emit() per string."""

    def __init__(self) -> None:
        self.parts: List[tuple] = []

    def emit(self, kind, step, attempt, fields):
        self.parts.append((kind, step, attempt, fields))
        return len(self.parts) - 1

    def next_attempt(self, step):
        return 1


def test_texts_on_a_sink_without_emit_texts_and_outside_a_step():
    sink = _PlainSink()
    ctx = TurnContext(
        prompt="p",
        session_id="s",
        turn_id="t",
        state=SessionState("s", 0, None),
        completed_steps=0,
        steps=[],
        cancelled=threading.Event(),
        sink=sink,
    )
    with pytest.raises(RuntimeError, match="start_step"):
        ctx.texts(["x"])
    ctx.start_step()
    ctx.texts(["x", "y"])
    assert sink.parts[1:] == [("text-delta", 0, 1, {"text": "x"}), ("text-delta", 0, 1, {"text": "y"})]

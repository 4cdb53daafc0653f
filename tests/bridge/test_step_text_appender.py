"""Attacks on the per-step text appender behind ``ctx.text``/``ctx.reasoning``:
odd strings go into the durable log as JSON that ``part_from_dict`` reads back
to the same text after the store is closed and opened again; refused input (a lone surrogate,
a non-str) raises, writes nothing and leaves the context usable."""
from __future__ import annotations

import json
import threading
from typing import Any, List

import pytest

from bridge_client.bridge.driver import TurnContext
from bridge_client.bridge.store import Store, read_parts
from bridge_client.bridge.turns import TurnManager
from bridge_client.wire.parts import part_from_dict

pytestmark = pytest.mark.timeout(60)


class _Text(str):
    pass


ODD = [
    "", "\x00", "a\x00b", "\x01\x1f\x7f", '"', "\\", '\\"', "\n\r\t\b\f", "\u2028\u2029",
    "\U0001f600" * 3, "é" * 10, "\ufeff", "\uffff", "x" * 200_000, "é" * 100_000, "</script>",
    "\\u0000", _Text("a str subclass"),
]
REFUSED: List[Any] = ["\ud83d\ude00", "\ud800", "a\udfffb", 1, None, b"x"]


class _OddDriver:
    agent_id = "echo"

    def __init__(self) -> None:
        self.errors: List[str] = []
        self.done = threading.Event()

    def initial_state(self) -> Any:
        return None

    def run_turn(self, ctx: TurnContext) -> None:
        try:
            ctx.start_step()
            for s in ODD:
                ctx.text(s)
                ctx.reasoning(s)
            for bad in REFUSED:
                for emit in (ctx.text, ctx.reasoning):
                    try:
                        emit(bad)
                    except (TypeError, ValueError) as exc:
                        self.errors.append(type(exc).__name__)
            ctx.reset_step("again")
            ctx.start_step()
            for s in ODD:
                ctx.text(s)
            ctx.finish_step()
        finally:
            self.done.set()


def test_b03_odd_texts_read_back_equal_after_the_store_is_opened_again(tmp_path):
    path = str(tmp_path / "bridge.sqlite3")
    store = Store(path)
    driver = _OddDriver()
    manager = TurnManager(store, driver, agent_id="echo", bridge_id="b" * 32)
    try:
        manager.open_session("s", None)
        manager.start_turn("s", "t", "p")
        assert driver.done.wait(30)
    finally:
        manager.close()
        store.close()
    assert driver.errors == ["ValueError"] * 6 + ["TypeError"] * 6
    stored = [json.loads(p.text) for p in read_parts(path, "t")]
    assert [d["index"] for d in stored] == list(range(len(stored)))
    got = [
        (d["type"], part_from_dict(d).text)  # type: ignore[attr-defined]
        for d in stored
        if d["type"] in ("text-delta", "reasoning-delta")
    ]
    want = [(kind, s) for s in ODD for kind in ("text-delta", "reasoning-delta")]
    want += [("text-delta", s) for s in ODD]
    assert got == want
    assert [d["type"] for d in stored].count("step-reset") == 1

"""The openai driver hands the text deltas of chunks that arrived together to the bridge as one
batch (``ctx.texts``), the same parts in the stream's order."""
from __future__ import annotations

from typing import Any, List, Tuple

from bridge_client.drivers.openai_chat import OpenAIChatDriver, _flush


class _Ctx:
    """Records what a driver emits."""

    def __init__(self) -> None:
        self.calls: List[Tuple[str, Any]] = []

    def text(self, s: str) -> None:
        self.calls.append(("text", s))

    def texts(self, chunks: List[str]) -> None:
        self.calls.append(("texts", list(chunks)))

    def reasoning(self, s: str) -> None:
        self.calls.append(("reasoning", s))


def _chunk(**delta: Any) -> dict:
    return {"choices": [{"index": 0, "delta": delta}]}


def test_deltas_queued_together_go_as_one_batch_in_order():
    ctx, text, calls, pending = _Ctx(), [], {}, []
    batch = [_chunk(content="He"), _chunk(content="llo"), _chunk(reasoning_content="hm"),
             _chunk(content=" wor"), _chunk(content="ld"), _chunk(content="!")]
    for value in batch:
        OpenAIChatDriver._apply(ctx, value, text, calls, pending)  # type: ignore[arg-type]
    _flush(ctx, pending)  # type: ignore[arg-type]
    assert ctx.calls == [("texts", ["He", "llo"]), ("reasoning", "hm"), ("texts", [" wor", "ld", "!"])]
    assert "".join(text) == "Hello world!" and pending == []


def test_a_lone_delta_goes_as_it_came():
    ctx, text, pending = _Ctx(), [], []
    OpenAIChatDriver._apply(ctx, _chunk(content="hi"), text, {}, pending)  # type: ignore[arg-type]
    _flush(ctx, pending)  # type: ignore[arg-type]
    assert ctx.calls == [("text", "hi")]

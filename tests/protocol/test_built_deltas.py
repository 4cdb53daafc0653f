"""Deltas built into parts by the connection's reader (the per-part
path): a turn's ReadTurn stream gets text deltas as parts, each once, acked as before; other
streams and other forms get JSON objects as before; a real bridge's Chunks take the path."""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import pytest
from test_misbehaving_bridge import _connect, _exit, fake  # noqa: F401 (fake: a fixture)

import bridge_client as bc
from bridge_client.client import connection as connection_module
from bridge_client.client.connection import END
from bridge_client.wire.parts import TextDelta

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "host"))
from host_support import options, session_options, wait_until  # noqa: E402

pytestmark = pytest.mark.timeout(60)


def _chunk(request_id: str, first: int, n: int, spaced: bool = False) -> str:
    values = [{"type": "text-delta", "index": first + i, "step": 0, "attempt": 1, "text": f"t{first + i}"}
              for i in range(n)]
    envelope = {"_tag": "Chunk", "requestId": request_id, "values": values}
    return json.dumps(envelope) if spaced else json.dumps(envelope, separators=(",", ":"))


def _read_all(stream: Any) -> list:
    values: list = []
    while True:
        got = stream.take(timeout=10)
        if got is END:
            return values
        values.extend(got)


def _serve_three_chunks(ws: Any, message: Any) -> None:
    rid = message["id"]
    ws.send(_chunk(rid, 0, 3))
    ws.send(_chunk(rid, 3, 2, spaced=True))  # another form of the same JSON: the general path
    ws.send(_chunk(rid, 5, 2))
    ws.send(_exit(rid, None))


def test_c09_a_stream_that_takes_parts_gets_built_deltas_once_each_and_acks_every_chunk(fake):  # noqa: F811
    server = fake(_serve_three_chunks)
    conn = _connect(server)
    try:
        stream = conn.stream("ReadTurn", {})
        stream.take_parts()
        time.sleep(0.2)  # the Chunks arrive after take_parts (a real turn's first Chunk may not)
        values = _read_all(stream)
        assert [type(v) for v in values] == [TextDelta] * 3 + [dict] * 2 + [TextDelta] * 2
        assert [v.index if isinstance(v, TextDelta) else v["index"] for v in values] == list(range(7))
        assert [v.text for v in values if isinstance(v, TextDelta)] == ["t0", "t1", "t2", "t5", "t6"]
        assert wait_until(lambda: sum(m.get("_tag") == "Ack" for m in server.received) == 3, 5)
    finally:
        conn.close()


def test_c09_a_chunk_past_the_buffers_bound_is_built_too_and_its_ack_waits_for_the_take(fake):  # noqa: F811
    high = connection_module._HIGH_WATER

    def behaviour(ws: Any, message: Any) -> None:
        rid = message["id"]
        ws.send(_chunk(rid, 0, high))  # fills the buffer to its bound: acked at once
        ws.send(_chunk(rid, high, 2))  # arrives past the bound: its Ack is held back
        ws.send(_exit(rid, None))

    server = fake(behaviour)
    conn = _connect(server)
    try:
        stream = conn.stream("ReadTurn", {})
        stream.take_parts()
        time.sleep(0.3)  # both Chunks in, nothing taken
        assert sum(m.get("_tag") == "Ack" for m in server.received) == 1
        values = _read_all(stream)
        assert [v.index if type(v) is TextDelta else v["index"] for v in values] == list(range(high + 2))
        # The second Chunk, past the bound, is built (the first may have come before take_parts).
        assert [type(v) for v in values[high:]] == [TextDelta, TextDelta]
        assert wait_until(lambda: sum(m.get("_tag") == "Ack" for m in server.received) == 2, 5)
    finally:
        conn.close()


def test_c09_a_stream_that_does_not_take_parts_gets_json_objects_as_before(fake):  # noqa: F811
    server = fake(_serve_three_chunks)
    conn = _connect(server)
    try:
        values = _read_all(conn.stream("ReadTurn", {}))
        assert values == [json.loads(_chunk("1", 0, 7))["values"][i] for i in range(7)]
    finally:
        conn.close()


def test_c09_a_real_bridges_deltas_are_built_by_the_reader_and_the_text_is_whole(sandbox, monkeypatch):
    built = []
    real = connection_module.delta_chunk

    def counting(data: Any) -> Any:
        got = real(data)
        built.append(got is not None)
        return got

    monkeypatch.setattr(connection_module, "delta_chunk", counting)
    prompt = " ".join(f"w{i}" for i in range(20000))
    echo = options("echo", agent_options={"chunks": 20000})
    with bc.create_session(echo, session_options(sandbox)) as session:
        turn = session.turn(prompt)
        parts = list(turn)
    assert turn.text() == prompt
    deltas = [p for p in parts if isinstance(p, TextDelta)]
    assert len(deltas) == 20000 and [p.index for p in deltas] == sorted({p.index for p in deltas})
    assert any(built), "no Chunk of the bridge's took the built path"

"""The bridge's pieces in-process, without sockets: TurnContext, Store, Turn, the continue
analysis, the drivers' options, the idle watcher, driver loading."""
from __future__ import annotations

import json
import sqlite3
import threading
import time
from typing import List, Optional

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bridge_client.bridge import TurnContext, TurnResult
from bridge_client.bridge.__main__ import LaunchError, builtin_drivers, load_driver
from bridge_client.bridge.server import IdleWatcher
from bridge_client.bridge.store import (
    Store,
    StoredPart,
    StoreError,
    part_op,
    read_parts,
    session_op,
    summary,
    turn_op,
)
from bridge_client.bridge.turns import MAX_CHUNK_BYTES, Turn, TurnManager, _outcome, _progress
from bridge_client.drivers import echo, shell
from bridge_client.wire.parts import SessionState

pytestmark = pytest.mark.timeout(60)


# ---------------------------------------------------------------------------- TurnContext


class RecordingSink:
    def __init__(self) -> None:
        self.parts: List[tuple] = []
        self.revision = 0

    def emit(self, kind, step, attempt, fields):
        json.dumps(fields, allow_nan=False)  # like the real sink: non-JSON raises, nothing kept
        self.parts.append((kind, step, attempt, fields))
        return len(self.parts) - 1

    def next_attempt(self, step):
        return 2 if step == 1 else 1

    def finish_step(self, step, attempt, finish_reason, usage):
        self.emit("step-finish", step, attempt, {"finishReason": finish_reason, "usage": usage})

    def set_state(self, data, step, attempt):
        self.revision += 1
        state = SessionState("s", self.revision, data)
        self.emit("session-state", step, attempt, {"state": state.to_dict()})
        return state


def _ctx(completed: int = 0, sink: Optional[RecordingSink] = None) -> TurnContext:
    return TurnContext(
        prompt="p",
        session_id="s",
        turn_id="t",
        state=SessionState("s", 0, None),
        completed_steps=completed,
        steps=[],
        cancelled=threading.Event(),
        sink=sink or RecordingSink(),
    )


def test_context_emits_steps_with_numbers_and_attempts():
    sink = RecordingSink()
    ctx = _ctx(completed=1, sink=sink)
    ctx.data("before", 1)
    assert ctx.start_step() == 1
    assert (ctx.step, ctx.attempt) == (1, 2)
    ctx.text("hi")
    ctx.reasoning("hmm")
    ctx.tool_call("c1", "tool", {"a": 1})
    ctx.tool_result("c1", "tool", "out", is_error=True)
    state = ctx.set_state({"k": 1})
    assert ctx.state == state
    ctx.finish_step("tool-calls", {"tokens": 3})
    assert ctx.step is None
    assert ctx.start_step() == 2
    assert [(k, s, a) for k, s, a, _ in sink.parts] == [
        ("data", None, 1),
        ("step-start", 1, 2),
        ("text-delta", 1, 2),
        ("reasoning-delta", 1, 2),
        ("tool-call", 1, 2),
        ("tool-result", 1, 2),
        ("session-state", 1, 2),
        ("step-finish", 1, 2),
        ("step-start", 2, 1),
    ]
    assert sink.parts[5][3]["isError"] is True


@pytest.mark.parametrize(
    "misuse, message",
    [
        (lambda c: c.text("x"), "text() outside a step: call start_step() first"),
        (lambda c: c.tool_call("i", "n", None), "tool_call() outside a step: call start_step() first"),
        (lambda c: c.finish_step(), "finish_step() outside a step: no step is open"),
        (
            lambda c: (c.start_step(), c.start_step()),
            "start_step() inside a step (step 0): call finish_step() first",
        ),
    ],
)
def test_context_misuse_raises_and_writes_nothing(misuse, message):
    sink = RecordingSink()
    ctx = _ctx(sink=sink)
    with pytest.raises(RuntimeError) as info:
        misuse(ctx)
    assert str(info.value) == message
    assert len(sink.parts) <= 1  # at most the first start_step of the pair


def test_context_refuses_everything_after_close():
    ctx = _ctx()
    ctx.start_step()
    assert ctx.close() == (0, 1)
    for call in (lambda: ctx.text("x"), lambda: ctx.data("n", 1), lambda: ctx.set_state(1), ctx.start_step):
        with pytest.raises(RuntimeError, match="after run_turn"):
            call()


def test_context_type_errors():
    ctx = _ctx()
    ctx.start_step()
    with pytest.raises(TypeError):
        ctx.text(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ctx.tool_call(1, "n", None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ctx.tool_call("i", "n", object())
    with pytest.raises(ValueError):
        ctx.data("n", float("nan"))
    ctx.text("still in the step")


def test_outcome_of_driver_results():
    assert _outcome(None) == ("stop", None, None)
    assert _outcome("max-steps") == ("max-steps", None, None)
    assert _outcome(TurnResult("error", {"t": 1}, "boom")) == ("error", {"t": 1}, "boom")
    assert _outcome("weird")[0] == "error"
    assert _outcome(42)[0] == "error"


# ---------------------------------------------------------------------------- Store


class ListSink:
    def __init__(self) -> None:
        self.parts: List[StoredPart] = []

    def publish(self, parts):
        self.parts.extend(parts)


def test_store_commits_then_publishes_in_order(tmp_path):
    path = str(tmp_path / "s.sqlite3")
    store = Store(path)
    sink = ListSink()
    store.submit(turn_op("t", "s", "p", "now", {"x": 1}, {"sessionId": "s", "revision": 0, "data": None}))
    for i in range(1000):
        ticket = store.submit(part_op(sink, "t", StoredPart(i, 0, 1, "text-delta", json.dumps({"i": i}))))
    store.wait(ticket, 10)
    assert [p.index for p in sink.parts] == list(range(1000))
    assert [p.index for p in store.load_parts("t")] == list(range(1000))
    assert store.load_turn("t").status == "running"
    store.close()
    store.close()  # idempotent
    with pytest.raises(StoreError):
        store.submit(session_op("s", 1, None, False))


def test_store_session_revisions_only_grow(tmp_path):
    store = Store(str(tmp_path / "s.sqlite3"))
    store.wait(store.submit(session_op("s", 5, {"a": 1}, False)))
    store.wait(store.submit(session_op("s", 3, {"a": 0}, True)))
    assert store.load_session("s") == ("s", 5, {"a": 1}, False)
    store.wait(store.submit(session_op("s", 5, {"a": 1}, True)))
    assert store.load_session("s").closed is True
    store.close()


def test_store_failure_is_reported_and_refuses_later_writes(tmp_path):
    failed = []
    store = Store(str(tmp_path / "s.sqlite3"), on_fatal=failed.append)
    ticket = store.submit(
        part_op(None, "t", StoredPart(0, None, 1, "x", "{}")),
        part_op(None, "t", StoredPart(0, None, 1, "x", "{}")),
    )
    with pytest.raises(StoreError):
        store.wait(ticket, 5)
    assert failed and isinstance(failed[0], sqlite3.IntegrityError)
    with pytest.raises(StoreError):
        store.submit(session_op("s", 1, None, False))
    assert store.load_parts("t") == []  # the failed batch was rolled back as a whole
    store.close()


def test_summary_of_missing_empty_and_filled_stores(tmp_path):
    with pytest.raises(FileNotFoundError):
        summary(str(tmp_path / "nope.sqlite3"))
    sqlite3.connect(str(tmp_path / "empty.sqlite3")).close()
    assert summary(str(tmp_path / "empty.sqlite3")) == {"sessions": 0, "turns": 0, "running": 0}
    path = str(tmp_path / "s.sqlite3")
    store = Store(path)
    state = {"sessionId": "s", "revision": 0, "data": None}
    store.submit(session_op("s", 0, None, False), turn_op("a", "s", "p", "now", {}, state))
    store.wait(store.submit(turn_op("b", "s", "p", "now", {}, state)))
    assert summary(path) == {"sessions": 1, "turns": 2, "running": 2}  # while the store is open
    store.close()
    assert summary(path) == {"sessions": 1, "turns": 2, "running": 2}


# ---------------------------------------------------------------------------- Turn, progress


def _turn_with(parts):
    turn = Turn("t", "s", "p", SessionState("s", 0, None), "orphan")
    turn.load([StoredPart(i, s, a, k, json.dumps({"i": i, "k": k})) for i, (s, a, k) in enumerate(parts)])
    return turn


LOG = [
    (None, 1, "turn-start"),
    (0, 1, "step-start"),
    (0, 1, "text-delta"),
    (0, 1, "step-finish"),
    (1, 1, "step-start"),
    (1, 1, "tool-call"),
    (1, 1, "step-reset"),
    (1, 2, "step-start"),
    (1, 2, "text-delta"),
    (1, 2, "step-finish"),
    (None, 1, "turn-finish"),
]


def test_turn_take_filters_steps_and_discarded_attempts():
    turn = _turn_with(LOG)
    texts, position, done = turn.take(0)
    assert [json.loads(t)["i"] for t in texts] == [0, 1, 2, 3, 6, 7, 8, 9, 10]
    assert position == len(LOG) and done
    texts, _, _ = turn.take(0, after_step=1)
    assert [json.loads(t)["i"] for t in texts] == [0, 6, 7, 8, 9, 10]
    texts, position, done = turn.take(0, max_values=2)
    assert len(texts) == 2 and position == 2 and not done
    texts, _, _ = turn.take(0, max_bytes=1)
    assert len(texts) == 1  # one part even when it alone is over the bound


def test_progress_finds_completed_and_open_steps():
    metas = LOG[:6]
    progress = _progress(metas, set())
    assert progress.completed == 1 and progress.open_step == (1, 1)
    turn = _turn_with(LOG[:7])
    progress = _progress(turn.metas, turn.discarded)
    assert progress.completed == 1 and progress.open_step is None  # already reset
    assert turn.max_attempt == {0: 1, 1: 1}


# ---------------------------------------------------------------------------- TurnManager in-process


def test_manager_runs_turns_and_continues_an_orphan(tmp_path):
    path = str(tmp_path / "m.sqlite3")
    store = Store(path)
    manager = TurnManager(store, echo.EchoDriver(steps=2), agent_id="echo", bridge_id="b" * 32)
    assert manager.open_session("s", None)["data"] == {"turns": 0}
    assert manager.start_turn("s", "t", "a b")["status"] == "started"
    turn = manager.find_turn("s", "t")
    turn.wait_for_parts(10**9, lambda: False)  # until complete
    assert manager.start_turn("s", "t", "a b")["status"] == "finished"
    assert manager.running == 0
    manager.close()
    store.close()
    # Cut the log inside step 1, as a crash would, and continue it in a new manager.
    kept = read_parts(path, "t")
    (cut,) = [p.index for p in kept if p.step == 1 and p.type == "tool-call"]
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM segments WHERE turn_id='t'")
    conn.execute(
        "INSERT INTO segments (turn_id, first_idx, n_parts, parts) VALUES ('t', 0, ?, ?)",
        (cut + 1, "\n".join(p.text for p in kept[: cut + 1])),
    )
    conn.execute("UPDATE turns SET status='running', finish=NULL")
    conn.commit()
    conn.close()
    store = Store(path)
    manager = TurnManager(store, echo.EchoDriver(steps=2), agent_id="echo", bridge_id="b" * 32)
    assert manager.start_turn("s", "t", "a b")["status"] == "continued"
    turn = manager.find_turn("s", "t")
    turn.wait_for_parts(10**9, lambda: False)
    kinds = [(k, s, a) for s, a, k in turn.metas]
    assert ("step-reset", 1, 1) in kinds and ("step-start", 1, 2) in kinds
    assert kinds[-1] == ("turn-finish", None, 1)
    manager.close()
    store.close()


# ---------------------------------------------------------------------------- drivers


@given(st.text())
def test_echo_split_by_words_joins_back(prompt):
    assert "".join(echo.split_prompt(prompt)) == prompt


@given(st.text(), st.integers(min_value=1, max_value=50))
def test_echo_split_in_n_chunks_joins_back(prompt, n):
    pieces = echo.split_prompt(prompt, n)
    assert len(pieces) == n and "".join(pieces) == prompt


def test_echo_split_keeps_whitespace_with_words():
    assert echo.split_prompt("  hello  big\nworld ") == ["  hello  ", "big\n", "world "]


@pytest.mark.parametrize(
    "options",
    [
        [],
        "x",
        {"steps": 0},
        {"steps": True},
        {"steps": 1.5},
        {"delay": -1},
        {"delay": "1"},
        {"delay": float("inf")},
        {"chunks": 0},
        {"fail_at": -1},
        {"stepz": 1},
    ],
)
def test_echo_rejects_bad_options(options):
    with pytest.raises(ValueError):
        echo.make_driver(options)


def test_echo_defaults_and_options():
    d = echo.make_driver(None)
    assert (d.steps, d.delay, d.chunks, d.fail_at, d.agent_id) == (1, 0.0, None, None, "echo")
    d = echo.make_driver({"steps": 3, "delay": 0, "chunks": 4, "fail_at": 2})
    assert (d.steps, d.chunks, d.fail_at) == (3, 4, 2)


@pytest.mark.parametrize(
    "options",
    [
        5,
        {"timeout": 0},
        {"timeout": "1"},
        {"timeout": True},
        {"shell": ""},
        {"shell": 3},
        {"keep_going": 1},
        {"x": 1},
    ],
)
def test_shell_rejects_bad_options(options):
    with pytest.raises(ValueError):
        shell.make_driver(options)


def test_shell_defaults():
    d = shell.make_driver({})
    assert (d.timeout, d.shell, d.keep_going, d.agent_id) == (600.0, "/bin/sh", False, "shell")


# ---------------------------------------------------------------------------- loading drivers


@pytest.mark.parametrize(
    "spec, message",
    [
        ("nope", "unknown driver 'nope'"),
        ("no_such_module_q:make", "cannot import driver module"),
        ("bridge_client.drivers.echo:nothing", "has no 'nothing'"),
        ("bridge_client.drivers.echo:__doc__", "is not callable"),
        ("bridge_client.drivers.echo:split_prompt", "refused its options"),
        ("builtins:str", "did not return a driver"),
    ],
)
def test_load_driver_errors(spec, message):
    with pytest.raises(LaunchError, match=message):
        load_driver(spec, None, builtin_drivers())


def test_load_driver_builtin_names():
    registry = builtin_drivers()
    assert load_driver("echo", {"steps": 2}, registry).steps == 2
    assert load_driver("shell", None, registry).agent_id == "shell"
    assert load_driver("bridge_client.drivers.echo:make_driver", None, registry).agent_id == "echo"


# ---------------------------------------------------------------------------- idle watcher


def test_idle_watcher_fires_once_idle_and_not_while_busy():
    fired = threading.Event()
    watcher = IdleWatcher(0.2, fired.set)
    watcher.connection_opened()
    watcher.start()
    assert not fired.wait(0.4)
    watcher.connection_closed()
    watcher.set_running(1)
    assert not fired.wait(0.4)
    t0 = time.monotonic()
    watcher.set_running(0)
    assert fired.wait(2)
    assert time.monotonic() - t0 >= 0.15


def test_b06_idle_watcher_is_woken_only_when_the_bridge_becomes_idle():
    # Connections and turns of a busy bridge come and go without waking its watcher thread
    # (a thread switch each, on a bridge serving many sessions); going idle wakes it.
    fired = threading.Event()
    watcher = IdleWatcher(0.2, fired.set)
    notified = []
    inner = watcher._cond.notify_all
    watcher._cond.notify_all = lambda: (notified.append(1), inner())[1]
    watcher.connection_opened()
    watcher.start()
    for _ in range(10):
        watcher.connection_opened()
        watcher.set_running(1)
        watcher.set_running(0)
        watcher.connection_closed()
    assert notified == [] and not fired.is_set()
    t0 = time.monotonic()
    watcher.connection_closed()
    assert notified == [1]
    assert fired.wait(2)
    assert time.monotonic() - t0 >= 0.15


def test_b06_idle_watcher_counts_from_the_last_close_after_a_connection_outlived_its_wait():
    # A connection opened while the watcher waited out its idle time (no wake) and still open at
    # that deadline keeps the bridge up; its close starts the idle time again.
    fired = threading.Event()
    watcher = IdleWatcher(0.2, fired.set)
    watcher.start()
    watcher.connection_opened()
    assert not fired.wait(0.5)
    t0 = time.monotonic()
    watcher.connection_closed()
    assert fired.wait(2)
    assert time.monotonic() - t0 >= 0.15


def test_idle_watcher_stop_prevents_firing():
    fired = threading.Event()
    watcher = IdleWatcher(0.1, fired.set)
    watcher.start()
    watcher.stop()
    assert not fired.wait(0.3)


# ---------------------------------------------------------------------------- bad driver output, silent peers


class SurrogateDriver:
    agent_id = "echo"

    def run_turn(self, ctx):
        ctx.start_step()
        ctx.text("fine")
        ctx.text("lone \ud800")  # not valid Unicode: refused here, not in the store's writer


def test_a_driver_text_that_is_not_valid_unicode_fails_the_turn_not_the_store(tmp_path):
    store = Store(str(tmp_path / "u.sqlite3"))
    manager = TurnManager(store, SurrogateDriver(), agent_id="echo", bridge_id="b" * 32)
    manager.open_session("s", None)
    manager.start_turn("s", "t", "x")
    turn = manager.find_turn("s", "t")
    turn.wait_for_parts(10**9, lambda: False)
    finish = json.loads(turn.texts[-1])
    assert finish["finishReason"] == "error" and finish["error"].startswith(
        "ValueError: text holds a lone surrogate"
    )
    assert manager.start_turn("s", "t2", "y")["status"] == "started"  # the store still writes
    manager.close()
    store.close()


def test_a_silent_connection_is_closed_after_the_silence_timeout(tmp_path):
    import websocket

    from bridge_client.bridge.server import BridgeServer
    from bridge_client.redacted import Redacted

    store = Store(str(tmp_path / "q.sqlite3"))
    manager = TurnManager(store, echo.EchoDriver(), agent_id="echo", bridge_id="b" * 32)
    closed = threading.Event()
    idle = IdleWatcher(60, lambda: None)
    idle.connection_closed = closed.set  # type: ignore[method-assign]
    server = BridgeServer(manager, token=Redacted("tok"), hello={}, idle=idle, silence_timeout=0.3)
    port = server.start()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        ws = websocket.create_connection(
            f"ws://127.0.0.1:{port}/", header=["Authorization: Bearer tok"], timeout=5
        )
        t0 = time.monotonic()
        opcode, data = ws.recv_data(control_frame=True)
        assert opcode == websocket.ABNF.OPCODE_CLOSE and int.from_bytes(data[:2], "big") == 1001
        assert 0.2 < time.monotonic() - t0 < 3
        ws.send_close()
        ws.shutdown()
        assert closed.wait(3), "the connection should count as closed"
    finally:
        server.shutdown()
        thread.join(5)
        manager.close()
        store.close()


def test_turn_take_cuts_a_backlog_where_the_bytes_bound_is_reached():
    # The slice path (no filtering) cuts as the part-by-part path does: as many parts as fit
    # in max_bytes, at least one, at most max_values; a lone big part still goes alone.
    rng = __import__("random").Random(15)
    sizes = [rng.choice([60, 70, 700, 5000]) for _ in range(3000)]
    turn = Turn("t", "s", "p", SessionState("s", 0, None), "running")
    turn.publish_segment(["x" * n for n in sizes], [(0, 1, "text-delta")] * len(sizes), [])
    for max_values, max_bytes in ((1024, 64 * 1024), (256, 10_000), (1024, 100), (3, 10**9)):
        position, taken = 0, []
        while position < len(sizes):
            texts, new, done = turn.take(position, 0, max_values, max_bytes)
            assert 1 <= len(texts) <= max_values and new == position + len(texts) and not done
            assert len(texts) == 1 or sum(map(len, texts)) <= max_bytes
            if position + len(texts) < len(sizes) and len(texts) < max_values:
                assert sum(map(len, texts)) + sizes[new] > max_bytes  # the next one did not fit
            taken += texts
            position = new
        assert [len(t) for t in taken] == sizes
    texts, _, _ = turn.take(0)  # the defaults: a backlog goes about MAX_CHUNK_BYTES at once
    assert MAX_CHUNK_BYTES - 5000 < sum(map(len, texts)) <= MAX_CHUNK_BYTES

"""The host's read loop against hostile timing, each pinned by a deterministic test
(docs/resilience.md, docs/threads-and-processes.md):

- a ``KeyboardInterrupt`` at any bytecode of the read loses no part and repeats none (C09, C11):
  injected by a trace function at every n-th bytecode of the reading thread's code in
  ``turn.py`` and ``connection.py``, and by a hook in the middle of a chunk;
- ``suspend()`` from another thread while the reader fills its buffer loses nothing (C11);
- a ``Defect`` ends the connection and the read goes on over a new one from its offset; a
  ``Defect`` on every connection ends the read with ``BridgeUnavailable`` after the resend
  window (C08, C15);
- a ``KeyboardInterrupt`` while connecting leaves no reader thread or socket, and ``release()``
  never raises (C16);
- a launch inside a resend waits no longer than the rest of the window (C08, C15).
"""
from __future__ import annotations

import collections
import dis
import os
import random
import sys
import threading
import time
from typing import Any, Callable, List, Optional

import pytest
from websockets.sync.server import serve

import bridge_client as bc
import bridge_client.client.connection as connection_mod
import bridge_client.client.launcher as launcher_mod
import bridge_client.client.session as session_mod
import bridge_client.client.stream as stream_mod
import bridge_client.client.turn as turn_mod
import bridge_client.client.turn_source as turn_source_mod
from bridge_client.state_dir import identity
from bridge_client.template import Template
from host_support import options, session_options, wait_until

pytestmark = pytest.mark.timeout(120)

PROMPT = "abcdefghij"

# The files the read runs in: interrupts land at any of their bytecodes.
READ_FILES = [turn_mod.__file__, turn_source_mod.__file__, connection_mod.__file__, stream_mod.__file__]


def _echo(steps: int, chunks: int, delay: float = 0.0) -> bc.BridgeOptions:
    return options("echo", agent_options={"steps": steps, "chunks": chunks, "delay": delay})


def _read_through_interrupts(
    turn: bc.Turn, limit: int = 100_000, after: Callable[[], Any] = lambda: None
) -> List[bc.Part]:
    """Iterate ``turn`` to its end, iterating it again after every KeyboardInterrupt (the
    documented way to go on after a Ctrl-C); ``after()`` runs after each interrupt."""
    parts: List[bc.Part] = []
    for _ in range(limit):
        try:
            for part in turn:
                parts.append(part)
            return parts
        except KeyboardInterrupt:
            after()
    raise AssertionError("the read did not end")


def _check_exactly_once(parts: List[bc.Part], turn: bc.Turn, steps: int) -> None:
    indexes = [p.index for p in parts]
    repeated = [i for i, n in collections.Counter(indexes).items() if n > 1]
    assert not repeated, f"parts delivered twice: {repeated[:10]}"
    missing = sorted(set(range(max(indexes) + 1)) - set(indexes))
    assert not missing, f"parts lost: {missing[:10]} ({len(missing)})"
    assert indexes == sorted(indexes)
    assert isinstance(parts[0], bc.TurnStart) and isinstance(parts[-1], bc.TurnFinish)
    assert turn.done and turn.steps == steps
    assert turn.text() == PROMPT * steps


def _client_threads() -> set:
    return {t for t in threading.enumerate() if t.name.startswith("bridge-client-")}


# ---------------------------------------------------------------- 1. Ctrl-C while reading


class _InterruptAtBytecodes:
    """A trace function that raises KeyboardInterrupt, in the current thread, in code of the
    given files, at the bytecodes where CPython delivers a signal: right after a call returns
    (``CALL``), at a loop's jump back and at a function's start (``RESUME``), as SIGINT can.
    (Not elsewhere: between two other bytecodes no signal is delivered, and a ``with`` block
    left there would keep its lock.) Which of those points: after a gap of bytecodes from a
    seeded generator, mostly short (1-200, so every point near the start of a read is hit),
    sometimes long (up to 3000, so a whole batch can get through and the read progresses).
    CPython turns tracing off when a trace function raises: the reader installs it again."""

    DELIVERY = {"CALL", "CALL_FUNCTION_EX", "JUMP_BACKWARD", "RESUME"}

    def __init__(self, seed: int, files: List[str]) -> None:
        self.files = set(files)
        self.random = random.Random(seed)
        self.left = self._gap()
        self.raised = 0
        self.previous: dict = {}  # id(frame) -> the opcode it ran last

    def _gap(self) -> int:
        if self.random.random() < 0.7:
            return self.random.randint(1, 200)
        return self.random.randint(200, 3000)

    def __call__(self, frame: Any, event: str, arg: Any) -> Optional[Callable[..., Any]]:
        if frame.f_code.co_filename not in self.files:
            return None
        frame.f_trace_opcodes = True
        return self._local

    def _local(self, frame: Any, event: str, arg: Any) -> Optional[Callable[..., Any]]:
        key = id(frame)
        if event == "return":
            self.previous.pop(key, None)
        elif event == "opcode":
            before = self.previous.get(key)
            self.previous[key] = dis.opname[frame.f_code.co_code[frame.f_lasti]]
            self.left -= 1
            if self.left <= 0 and before in self.DELIVERY:
                self.left = self._gap()
                self.raised += 1
                self.previous.pop(key, None)
                raise KeyboardInterrupt
        return self._local


@pytest.mark.skipif(sys.version_info < (3, 11), reason="the delivery points are those of CPython 3.11+")
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_c09_c11_a_keyboard_interrupt_at_any_bytecode_of_the_read_loses_and_repeats_nothing(sandbox, seed):
    steps = 10
    with bc.create_session(_echo(steps, 40), session_options(sandbox)) as session:
        turn = session.turn(PROMPT)
        tracer = _InterruptAtBytecodes(seed, READ_FILES)
        sys.settrace(tracer)
        try:
            parts = _read_through_interrupts(turn, after=lambda: sys.settrace(tracer))
        finally:
            sys.settrace(None)
        assert tracer.raised > 40, f"the interrupts did not land in the read ({tracer.raised})"
        _check_exactly_once(parts, turn, steps)


def _before_each_value(monkeypatch: Any, hook: Callable[[Any], None]) -> None:
    """Call ``hook(value)`` before the turn builds the part of each value it took (its
    ``parts_from_dicts`` builds a segment of a batch in one call: here one value at a time)."""
    real = turn_mod.parts_from_dicts

    def one_by_one(values: Any, start: int = 0, stop: Any = None) -> Any:
        built, only_deltas = [], True
        for value in values[start:stop]:
            hook(value)
            part, deltas = real([value])
            built += part
            only_deltas = only_deltas and deltas
        return built, only_deltas

    monkeypatch.setattr(turn_mod, "parts_from_dicts", one_by_one)


@pytest.mark.parametrize("at_call", [2, 5, 17, 60, 70, 130])
def test_c09_an_interrupt_in_the_middle_of_a_chunk_loses_none_of_it(sandbox, monkeypatch, at_call):
    # The breaker's sigint_deterministic.py: Ctrl-C while the parts of one chunk are converted
    # (before and after the conversion's first checkpoint, at 64 values).
    steps = 3
    with bc.create_session(_echo(steps, 50, delay=0.002), session_options(sandbox)) as session:
        turn = session.turn(PROMPT)
        time.sleep(0.5)  # the rest of the turn piles up on the connection: one take gets a lot
        calls = [0]

        def flaky(value: Any) -> None:
            calls[0] += 1
            if calls[0] == at_call:
                raise KeyboardInterrupt

        _before_each_value(monkeypatch, flaky)
        parts = [next(turn)]  # turn-start, from the buffer _start filled
        parts += _read_through_interrupts(turn)
        assert calls[0] > at_call
        _check_exactly_once(parts, turn, steps)


# ---------------------------------------------------------------- 2. suspend from another thread


def test_c11_suspend_from_another_thread_while_the_reader_fills_its_buffer_loses_nothing(
    sandbox, monkeypatch
):
    steps = 10
    # 10,000+ parts: more than the first reads can take at once (a Chunk carries up to
    # MAX_CHUNK_VALUES, 4,096, and a new turn's first commit may hold all the driver emitted
    # at once: the turn-start's read converts its first Chunk before the hook is in).
    with bc.create_session(_echo(steps, 1000), session_options(sandbox)) as session:
        turn = session.turn(PROMPT)
        calls, suspended = [0], []

        def suspend_midway(value: Any) -> None:
            calls[0] += 1
            if calls[0] % 37 == 0:  # thread B suspends while A converts a chunk
                other = threading.Thread(target=lambda: suspended.append(session.suspend_turn()))
                other.start()
                other.join(10)

        _before_each_value(monkeypatch, suspend_midway)
        parts: List[bc.Part] = []
        rounds = 0
        while not turn.done:
            rounds += 1
            assert rounds < 10_000
            for part in turn:
                parts.append(part)
        assert len(suspended) > 3
        _check_exactly_once(parts, turn, steps)


def test_c11_suspend_from_another_thread_stops_the_reader_and_a_new_loop_reads_on(sandbox):
    steps = 3
    with bc.create_session(_echo(steps, 5, delay=0.02), session_options(sandbox)) as session:
        turn = session.turn(PROMPT)
        parts: List[bc.Part] = []
        for part in turn:
            parts.append(part)
            if len(parts) == 2:
                other = threading.Thread(target=session.suspend_turn)
                other.start()
                other.join(10)
        assert len(parts) == 2, "a suspend from another thread ends the reader's loop"
        assert not turn.done
        parts += list(turn)  # a new loop reads on
        _check_exactly_once(parts, turn, steps)


# ---------------------------------------------------------------- 5. Defect


def test_c08_a_defect_ends_the_connection_and_the_read_goes_on_from_its_offset(sandbox):
    # The breaker's defect_reconnect.py: a frame the bridge cannot read gets a Defect.
    steps = 5
    with bc.create_session(_echo(steps, 20, delay=0.005), session_options(sandbox)) as session:
        turn = session.turn(PROMPT)
        parts: List[bc.Part] = []
        for part in turn:
            parts.append(part)
            if len(parts) == 10:
                first = session._conn
                first._ws.send("this is not json")
        assert first.closed, "the connection that got the Defect is not used again"
        _check_exactly_once(parts, turn, steps)


def test_c15_a_defect_on_every_connection_ends_the_read_after_the_resend_window(sandbox, monkeypatch):
    steps = 3
    opts = session_options(sandbox, resend_window=2.0)
    with bc.create_session(_echo(steps, 100, delay=0.05), opts) as session:
        turn = session.turn(PROMPT)
        real_stream = connection_mod.Connection.stream

        def garbled_stream(self: Any, tag: str, payload: Any, holder: Any = None) -> Any:
            self._ws.send("this is not json")  # answered by a Defect, before any chunk
            return real_stream(self, tag, payload, holder)

        monkeypatch.setattr(connection_mod.Connection, "stream", garbled_stream)
        session._conn._ws.send("this is not json")
        started = time.monotonic()
        with pytest.raises(bc.BridgeUnavailable) as error:
            for _ in turn:
                pass
        # Resent until the window ran out; the last attempt's cause is the Defect itself or
        # the connection it closed, whichever the reader saw first.
        assert time.monotonic() - started >= 2.0 * 0.9
        assert "defect" in str(error.value) or "closed" in str(error.value)
        assert error.value.state is not None


# ---------------------------------------------------------------- 6. Ctrl-C while connecting


def _interrupt_after(obj: Any, name: str, monkeypatch: Any, when: Callable[[], bool] = lambda: True) -> None:
    """Make ``obj.name`` raise KeyboardInterrupt after it ran (as SIGINT can just after)."""
    real = getattr(obj, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        if when():
            raise KeyboardInterrupt
        return result

    monkeypatch.setattr(obj, name, wrapped)


@pytest.mark.parametrize(
    "where",
    ["reader-started", "in-hello", "after-launcher-connect", "after-open-session", "idle-timer-start"],
)
def test_c16_a_keyboard_interrupt_while_connecting_leaves_no_thread_and_release_never_raises(
    sandbox, monkeypatch, where
):
    # A bridge running already: the interrupt lands in find, not in a launch.
    with bc.create_session(_echo(1, 1), session_options(sandbox)) as warm:
        list(warm.turn("warm"))
    before = _client_threads()
    session = bc.create_session(_echo(1, 1), session_options(sandbox))
    with monkeypatch.context() as patch:
        if where == "reader-started":
            real_start = threading.Thread.start

            def start(self: threading.Thread) -> None:
                real_start(self)
                if self.name.startswith("bridge-client-reader-"):
                    raise KeyboardInterrupt  # just after the reader started

            patch.setattr(threading.Thread, "start", start)
        elif where == "in-hello":
            _interrupt_after(launcher_mod.HelloResult, "from_dict", patch)
        elif where == "after-launcher-connect":
            _interrupt_after(launcher_mod, "connect", patch)
        elif where == "after-open-session":
            _interrupt_after(session_mod.SessionState, "from_dict", patch)
        else:
            real_start = threading.Thread.start

            def start(self: threading.Thread) -> None:  # type: ignore[no-redef]
                if self.name.startswith("bridge-client-idle-"):
                    raise KeyboardInterrupt  # before the thread runs
                real_start(self)

            patch.setattr(threading.Thread, "start", start)
        with pytest.raises(KeyboardInterrupt):
            session.turn("interrupted")
    if where == "idle-timer-start":
        assert session.connected  # handed over before the interrupt: release() closes it
    else:
        assert not session.connected
        assert wait_until(lambda: not (_client_threads() - before), timeout=5.0), _client_threads() - before
    turn = session.turn("after the interrupt")  # the session is still usable
    assert list(turn)[-1].finish_reason == "stop"
    session.release()
    session.release()  # idempotent
    assert wait_until(lambda: not (_client_threads() - before), timeout=5.0), _client_threads() - before


# ---------------------------------------------------------------- the resend window bounds a launch


def test_c08_a_launch_inside_a_resend_waits_no_longer_than_the_rest_of_the_window(tmp_path, monkeypatch):
    # A bridge that upgrades and then never answers (a frozen one) sits behind the listening
    # file; the launched one never answers either. Every wait of connect(timeout=1) must fit
    # in that second: the Hello wait was open_timeout + ping_timeout (here 9 s) before.
    def silent(ws: Any) -> None:
        for _ in ws:
            pass

    server = serve(silent, "127.0.0.1", 0, compression=None)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        (tmp_path / "ws").mkdir()
        sandbox = bc.LocalSandbox(str(tmp_path / "ws"))
        plan = launcher_mod.LaunchPlan(
            sandbox=sandbox,
            agent_id="echo",
            bridge_id="0" * 32,
            command=sys.executable,
            args=("-c", "import time; time.sleep(30)"),
            template=Template(()),
            agent_options=None,
            token=bc.Redacted("t"),
            open_timeout=4.0,
            ping_timeout=5.0,
            launch_timeout=30.0,
        )
        port = int(server.socket.getsockname()[1])
        info = identity.ListeningInfo(1, "echo", plan.bridge_id, "127.0.0.1", port, 1, "i-1", "x")
        identity.secure_write(os.path.join(plan.state_dir, identity.LISTENING_FILE), info.to_json().encode())
        spawned: List[Any] = []

        class NeverAnswers:
            def poll(self) -> Optional[int]:
                return None

        monkeypatch.setattr(
            launcher_mod, "_launch",
            lambda plan, recheck=False: launcher_mod._Launched(
                spawned.append(1) or NeverAnswers(), False, ()
            ),
        )
        waits: List[float] = []
        real_call = connection_mod.Connection.call

        def call(self: Any, tag: str, payload: Any, timeout: Optional[float] = None) -> Any:
            waits.append(float("inf") if timeout is None else timeout)
            return real_call(self, tag, payload, timeout)

        monkeypatch.setattr(connection_mod.Connection, "call", call)
        with pytest.raises(bc.BridgeLaunchError):
            launcher_mod.connect(plan, timeout=1.0)
        assert spawned and waits
        # Each Hello waits at most what was left of the second when it began.
        assert max(waits) <= 1.0, waits
    finally:
        server.shutdown()
        thread.join(5)

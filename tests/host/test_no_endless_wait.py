"""C20 and C05 on the host: a silent driver ends the read at the stall bound (pings do not
count), a send cut short by Ctrl-C breaks its connection at once, a refused port is probed
with backoff, and a launched bridge killed while it held the lock does not fail a host whose
bridge another host replaced. Real bridge processes, real sockets."""
from __future__ import annotations

import fcntl
import os
import signal
import socket
import threading
import time
from typing import Any, List, Optional

import pytest

import bridge_client as bc
from bridge_client.state_dir import identity
from bridge_client.client import launcher
from host_support import options, session_options, wait_until

pytestmark = pytest.mark.timeout(60)


def _texts(parts) -> str:
    return "".join(p.text for p in parts if isinstance(p, bc.TextDelta))


# ----------------------------------------------------------------------------- stall bound


def test_c20_a_silent_driver_ends_the_read_with_turn_stalled_carrying_the_state(sandbox):
    # Pings every 0.2 s keep the connection alive: only the missing parts end the read.
    so = session_options(sandbox, turn_stall_timeout=2.0, ping_interval=0.2, ping_timeout=1.0)
    with bc.create_session(options("shell"), so) as session:
        assert _texts(session.turn("echo warm")) == "warm\n"  # the launch is not what is timed
        turn = session.turn("echo before\nsleep 30")
        seen: List[Any] = []
        outcome: List[BaseException] = []

        def read() -> None:
            try:
                for part in turn:
                    seen.append(part)
            except BaseException as exc:  # noqa: BLE001 - handed to the test thread
                outcome.append(exc)

        reader = threading.Thread(target=read, daemon=True)
        started = time.monotonic()
        reader.start()
        reader.join(15)
        assert not reader.is_alive(), "the read of a silent driver never ended"
        assert outcome and isinstance(outcome[0], bc.TurnStalled), outcome
        error = outcome[0]
        assert time.monotonic() - started < 10
        assert error.seconds >= 2.0
        assert error.state is not None and error.state.turn_id == turn.id
        assert _texts(seen) == "before\n"  # everything before the silence was read
        assert session.connected  # the keepalive held; only the read ended
        # The turn goes on in its bridge and is still the session's: cancel it, read it out.
        session.cancel_turn()
        rest = list(turn)
        assert rest[-1].type == "turn-finish" and rest[-1].finish_reason == "cancelled"
        assert not any(p.index < seen[-1].index + 1 for p in rest)  # each part once


def test_c20_stall_timeout_is_checked_and_off_by_default(sandbox):
    assert session_options(sandbox).turn_stall_timeout is None
    for bad in (0, -1, float("inf"), True, "5"):
        with pytest.raises(ValueError):
            session_options(sandbox, turn_stall_timeout=bad)


# ----------------------------------------------------------------------------- Ctrl-C mid-send


class _CutSocket:
    """A socket whose next large send writes a part, then raises KeyboardInterrupt (a Ctrl-C
    in the middle of ``sendall``); everything else goes to the real socket."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.cut = False

    def send(self, data: Any) -> int:
        if not self.cut and len(data) > 1 << 20:
            self.cut = True
            self._sock.sendall(bytes(data[: 64 << 10]))
            raise KeyboardInterrupt
        return self._sock.send(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def test_c20_a_send_cut_short_breaks_the_connection_at_once(sandbox):
    # Default keepalive (5 s + 5 s): without the fix the next call waits for it.
    so = session_options(sandbox, ping_interval=5.0, ping_timeout=5.0)
    with bc.create_session(options("shell"), so) as session:
        assert _texts(session.turn("echo first")) == "first\n"
        conn = session._conn
        cut = _CutSocket(conn._ws.sock)
        conn._ws.sock = cut
        with pytest.raises(KeyboardInterrupt):
            session.turn("#" + "x" * (3 << 20))  # a 3 MiB prompt, cut after 64 KiB
        assert cut.cut
        assert conn.closed, "a half-written connection must count as broken at once"
        started = time.monotonic()
        assert _texts(session.turn("echo next")) == "next\n"
        assert time.monotonic() - started < 3.0
        assert session._conn is not conn


# ----------------------------------------------------------------------------- refused port


class _CountingSandbox(bc.LocalSandbox):
    """Counts the probes of a port (``expose``) and the launches (``spawn``)."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.probes: List[float] = []
        self.spawned: List[Any] = []

    def expose(self, port: int) -> bc.Endpoint:
        self.probes.append(time.monotonic())
        return super().expose(port)

    def spawn(self, argv, **kw):  # type: ignore[no-untyped-def]
        # Every launch comes only once the last launched bridge has exited.
        assert all(p.poll() is not None for p in self.spawned)
        process = super().spawn(argv, **kw)
        self.spawned.append(process)
        return process


def _refused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_c20_a_refused_port_is_probed_with_backoff_not_twenty_times_a_second(workspace):
    sandbox = _CountingSandbox(workspace)
    session = bc.create_session(options("echo"), session_options(sandbox, launch_timeout=5.0))
    plan = session._plan
    identity.make_private_dirs(plan.state_dir)
    # A live lock holder that does not listen (a bridge on its way out): our bridges lose the
    # lock race and exit 0, and the port in the listening file refuses every probe.
    lock = os.open(plan.path(identity.LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    port = _refused_port()
    listening = identity.ListeningInfo(
        1, "echo", plan.bridge_id, "127.0.0.1", port, os.getpid(), "held", "2020-01-01T00:00:00Z"
    )
    identity.secure_write(plan.path(identity.LISTENING_FILE), listening.to_json().encode())
    try:
        started = time.monotonic()
        with pytest.raises(bc.BridgeLaunchError):
            launcher.connect(plan)
        spent = time.monotonic() - started
    finally:
        os.close(lock)
        session.release()
    assert 4.5 < spent < 10
    # Backoff as the resend policy's (50 ms doubling to 2 s): about 8 probes in 5 s, not 100.
    assert len(sandbox.probes) <= 15, f"{len(sandbox.probes)} probes in {spent:.1f} s"
    assert 1 <= len(sandbox.spawned) <= 2


# ----------------------------------------------------------------------------- killed child


class _KilledWhileHoldingTheLock(bc.LocalSandbox):
    """The first bridge launched is SIGKILLed as soon as it holds the lock; then another
    host launches its own (the replacement), as nine other hosts would."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.killed: Optional[int] = None
        self.replacement: List[Any] = []

    def spawn(self, argv, **kw):  # type: ignore[no-untyped-def]
        process = super().spawn(argv, **kw)
        if self.killed is not None:
            return process
        lock = os.path.join(kw["env"][identity.STATE_DIR_ENV], identity.LOCK_FILE)

        def holds_lock() -> bool:
            try:
                with open(lock) as f:
                    return f.read().strip() == str(process.pid)
            except OSError:
                return False

        assert wait_until(holds_lock, timeout=20), "the launched bridge never took the lock"
        os.kill(process.pid, signal.SIGKILL)
        self.killed = process.pid
        wait_until(lambda: process.poll() is not None, timeout=5)
        self.replacement.append(super().spawn(argv, **kw))  # another host's launch
        return process


def test_c05_a_host_whose_bridge_was_killed_holding_the_lock_attaches_to_the_replacement(workspace):
    sandbox = _KilledWhileHoldingTheLock(workspace)
    with bc.create_session(options("echo"), session_options(sandbox, launch_timeout=20.0)) as session:
        assert _texts(session.turn("still here")) == "still here"
        assert sandbox.killed is not None
        assert session._hello.pid != sandbox.killed

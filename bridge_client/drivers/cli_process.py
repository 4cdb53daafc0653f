"""A coding-agent CLI run as a child process that prints one JSON event per line: what the
``claude-code`` and ``codex`` drivers share.

:class:`JsonLinesProcess` starts the CLI in its own process group (so a cancel or a shutdown
reaches every process it started), copies its stdout lines into a queue from a reader thread
(so the driver's thread can wait on the queue and on the turn's cancel event together), keeps
the last lines of stderr for error messages, and kills the group when asked.

Events are yielded as :class:`Event`: a parsed JSON object, or a line that is not one (the
drivers report those as ``data`` parts named ``<driver>-unparsed`` and go on).

A bridge that is SIGKILLed cannot end its CLI, whose own session outlives it; the turn then
goes on in the next bridge while the abandoned CLI could still be working. Every CLI is
therefore listed with a keeper process (:mod:`bridge_client.drivers.keeper`), which SIGKILLs
the groups still listed when the bridge's end of its pipe closes, however the bridge died.

:class:`CLIRuns` is a CLI driver's turn loop around it (pump the events, let the CLI exit after
its final event, stop one whose output ended early); where the program comes from is
:mod:`.cli_install`.
"""

from __future__ import annotations

import collections
import json
import os
import queue
import signal
import subprocess
import threading
import time
from typing import IO, Any, Callable, Deque, Dict, List, NamedTuple, Optional, Sequence, Set, Tuple

from ..bridge.driver import TurnContext, child_environ, process_group_ended, process_group_started
from .keeper import ProcessKeeper
from .tool_groups import kill_groups, with_tools

__all__ = [
    "JsonLinesProcess",
    "CLIRuns",
    "EarlyExit",
    "Event",
    "cli_env",
    "CLIStartError",
    "summarize",
    "join_text",
    "resume_point",
    "keep_session_id",
]

_STDERR_LINES = 20
_EOF = object()


_KEEPER: Optional[ProcessKeeper] = None
_KEEPER_LOCK = threading.Lock()


def _keeper() -> ProcessKeeper:
    global _KEEPER
    with _KEEPER_LOCK:
        if _KEEPER is None:
            _KEEPER = ProcessKeeper("agent CLIs")
        return _KEEPER


class CLIStartError(RuntimeError):
    """The CLI could not be started (not installed, not executable). The turn ends with
    ``error`` and this message."""


class Event(NamedTuple):
    """One stdout line of the CLI.

    Attributes:
        obj: the parsed JSON object, or ``None`` when the line is not a JSON object.
        line: the raw line (without its newline), for lines that did not parse.
    """

    obj: Optional[Dict[str, Any]]
    line: str


def cli_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The environment a CLI runs with: the bridge's own, minus every ``BRIDGE_CLIENT_*``
    variable, then the session's environment of the turn this thread runs
    (:func:`bridge_client.bridge.driver.session_env`), then ``extra``."""
    return child_environ(None, extra)


class JsonLinesProcess:
    """A running CLI whose stdout is JSON lines.

    Args:
        argv: the command (``argv[0]`` is looked up on ``PATH``).
        cwd: its working folder (the workspace).
        stdin_data: text written to stdin at start (``None``: nothing).
        keep_stdin: keep stdin open after ``stdin_data`` (for CLIs that read control
            messages there); otherwise it is closed at once.
        env: extra environment variables.

    Raises:
        CLIStartError: the program is missing or cannot be run.
    """

    def __init__(
        self,
        argv: Sequence[str],
        cwd: str,
        stdin_data: Optional[str] = None,
        keep_stdin: bool = False,
        env: Optional[Dict[str, str]] = None,
    ) -> None:
        self.argv = list(argv)
        try:
            self.proc: "subprocess.Popen[bytes]" = subprocess.Popen(
                self.argv,
                cwd=cwd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                env=cli_env(env),
            )
        except OSError as exc:
            raise CLIStartError(f"cannot run {self.argv[0]!r}: {exc.strerror or exc}") from None
        _keeper().started(self.proc.pid)  # its group: start_new_session made it the leader
        self._reaped = False
        process_group_started(self.proc.pid)  # the bridge kills it if the turn ignores a cancel
        self._stdin_lock = threading.Lock()
        self._queue: "queue.Queue[object]" = queue.Queue()
        self._stderr: Deque[str] = collections.deque(maxlen=_STDERR_LINES)
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self._threads = [
            threading.Thread(
                target=self._read_stdout, args=(self.proc.stdout,), daemon=True, name="cli-stdout"
            ),
            threading.Thread(
                target=self._read_stderr, args=(self.proc.stderr,), daemon=True, name="cli-stderr"
            ),
        ]
        for t in self._threads:
            t.start()
        if stdin_data is not None:
            self.write(stdin_data)
        if not keep_stdin:
            self.close_stdin()

    # ------------------------------------------------------------------ stdin

    def write(self, text: str) -> bool:
        """Write ``text`` to stdin; return False when stdin is closed or the CLI left."""
        with self._stdin_lock:
            stdin = self.proc.stdin
            if stdin is None or stdin.closed:
                return False
            try:
                stdin.write(text.encode("utf-8"))
                stdin.flush()
                return True
            except (BrokenPipeError, OSError, ValueError):
                return False

    def close_stdin(self) -> None:
        """Close stdin (end of input for the CLI); harmless when already closed."""
        with self._stdin_lock:
            stdin = self.proc.stdin
            if stdin is not None and not stdin.closed:
                try:
                    stdin.close()
                except (BrokenPipeError, OSError):
                    pass

    # ------------------------------------------------------------------ stdout

    def _read_stdout(self, stream: IO[bytes]) -> None:
        try:
            for raw in stream:
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except ValueError:
                    obj = None
                self._queue.put(Event(obj if isinstance(obj, dict) else None, line))
        except (OSError, ValueError):
            pass
        finally:
            self._queue.put(_EOF)

    def _read_stderr(self, stream: IO[bytes]) -> None:
        try:
            for raw in stream:
                text = raw.decode("utf-8", "replace").rstrip()
                if text:
                    self._stderr.append(text[:500])
        except (OSError, ValueError):
            pass

    def next_event(self, timeout: float) -> "Optional[object]":
        """Wait up to ``timeout`` seconds for the next stdout line.

        Returns:
            An :class:`Event`; ``None`` when nothing came in time; :data:`EOF` once stdout
            is closed (the CLI exited or closed it).
        """
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

    EOF = _EOF
    """What :meth:`next_event` returns after the last line."""

    def stderr_tail(self) -> str:
        """The last lines the CLI wrote to stderr, joined by `` | `` (may be empty).

        Once the CLI has exited, this first waits (at most 0.5 s) for the reader to reach
        the end of stderr, so lines written just before the exit are in the tail.
        """
        if self.proc.returncode is not None:
            self._threads[1].join(0.5)
        return " | ".join(self._stderr)

    # ------------------------------------------------------------------ the event loop

    def pump(
        self,
        cancelled: threading.Event,
        on_event: Callable[[Event], bool],
        interrupt: Callable[[], object],
        grace: float,
        tick: float = 0.1,
        idle: Optional[Callable[[], bool]] = None,
    ) -> str:
        """Hand every stdout line to ``on_event`` until it returns True (the CLI's final
        event), stdout ends, or a cancel is done with.

        On cancel, ``interrupt()`` is called once (the CLI's own way to stop); events keep
        flowing to ``on_event`` for up to ``grace`` seconds, then the process group is killed.

        ``idle()``, when given, is called before each wait for a line (at least every
        ``tick`` seconds), in this thread: a driver writes the user's messages to stdin there.
        It returns True when the run is over although no final event came (then ``"done"``).

        Returns:
            ``"done"`` (``on_event`` saw the final event, or ``idle`` said so), ``"eof"``
            (stdout ended first), or ``"killed"`` (cancelled and the CLI did not end within
            ``grace``).
        """
        interrupted_at: Optional[float] = None
        while True:
            if idle is not None and not cancelled.is_set() and idle():
                return "done"
            if cancelled.is_set():
                now = time.monotonic()
                if interrupted_at is None:
                    interrupted_at = now
                    interrupt()
                elif now - interrupted_at >= grace:
                    self.stop(grace=min(grace, 2.0))
                    return "killed"
            event = self.next_event(tick)
            if event is None:
                continue
            if event is _EOF:
                return "eof"
            assert isinstance(event, Event)
            if on_event(event):
                return "done"

    def finish(self, grace: float) -> Optional[int]:
        """After the final event: close stdin, give the CLI ``grace`` seconds to exit, then
        end it. Returns its exit status (``None`` when it had to be killed)."""
        self.close_stdin()
        code = self.wait(grace)
        if code is None:
            self.stop(grace=min(grace, 2.0))
            return None
        self.close()
        return code

    # ------------------------------------------------------------------ ending

    def wait(self, timeout: float) -> Optional[int]:
        """Wait up to ``timeout`` seconds for the CLI to exit; return its status or ``None``."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self._mark_reaped()
        return code

    def _mark_reaped(self) -> None:
        # Once reaped, the keeper must forget the group: its pid may be reused.
        if not self._reaped:
            self._reaped = True
            _keeper().ended(self.proc.pid)

    def signal_group(self, sig: int) -> None:
        """Send ``sig`` to the CLI's process group (nothing when it is gone)."""
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self, grace: float = 2.0, first: int = signal.SIGTERM) -> int:
        """End the CLI: ``first`` to its group, then SIGKILL after ``grace`` seconds.

        Returns:
            Its exit status (negative: the signal that ended it).
        """
        if self.proc.poll() is None:
            self.signal_group(first)
            if self.wait(grace) is None:
                self.signal_group(signal.SIGKILL)
        code = self.proc.wait()
        self._mark_reaped()
        self.close()
        return code

    def close(self) -> None:
        """Release the pipes and the reader threads (after the CLI exited). Also kills any
        process of its group that still holds stdout open."""
        if self.proc.returncode is not None:
            process_group_ended(self.proc.pid)
        self.close_stdin()
        deadline = time.monotonic() + 1.0
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() for t in self._threads):
            self.signal_group(signal.SIGKILL)  # a grandchild kept the pipes open
            for t in self._threads:
                t.join(1.0)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass


class EarlyExit(NamedTuple):
    """A CLI whose stdout ended before its final event (and not after a cancel).

    Attributes:
        code: its exit status, or ``None`` when it had not exited within the grace period.
        stderr_tail: the last lines it wrote to stderr (may be empty).
    """

    code: Optional[int]
    stderr_tail: str

    def error(self, label: str, before: str, tail: str) -> str:
        """The turn's error: ``"<label> exited (status 1) before <before>: <tail>"``."""
        status = f"status {self.code}" if self.code is not None else "its output closed"
        return f"{label} exited ({status}) before {before}" + (f": {summarize(tail)}" if tail else "")


class CLIRuns:
    """The runs of one CLI driver (a CLI process per turn): :meth:`run` pumps a run's events
    to its end, and :meth:`stop_all` kills the runs still going (the bridge is shutting down)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: Set[JsonLinesProcess] = set()

    def run(
        self,
        proc: JsonLinesProcess,
        cancelled: threading.Event,
        on_event: Callable[[Event], bool],
        grace: float,
        *,
        interrupt: Optional[Callable[[], object]] = None,
        idle: Optional[Callable[[], bool]] = None,
        keep: bool = False,
    ) -> Optional[EarlyExit]:
        """Pump ``proc``'s events to ``on_event`` (see :meth:`JsonLinesProcess.pump`), then end
        the CLI: after its final event it gets ``grace`` seconds to exit (with ``keep``, it is
        left running: a warm process for the next turn); a CLI whose output ended first is
        stopped. Anything raised (the bridge stopping) stops it too. ``interrupt`` is the
        CLI's own way to stop on a cancel (default: SIGINT to its process group, as Ctrl-C
        would).

        Returns:
            ``None`` when the run ended with its final event or a cancel; an
            :class:`EarlyExit` when its output ended first.
        """
        with self._lock:
            self._running.add(proc)
        tools: Set[int] = set()  # the process groups of the CLI's tools when it was cancelled
        try:
            if interrupt is None:
                interrupt = lambda: proc.signal_group(signal.SIGINT)  # noqa: E731
            interrupt = with_tools(proc.proc.pid, interrupt, tools)
            how = proc.pump(cancelled, on_event, interrupt, grace, idle=idle)
            if how == "done" and not keep:
                proc.finish(grace)
            elif how == "eof":
                code = proc.wait(grace)
                proc.stop()
                if not cancelled.is_set():
                    return EarlyExit(code, proc.stderr_tail())
            return None
        except BaseException:
            proc.stop()
            raise
        finally:
            kill_groups(tools)
            with self._lock:
                self._running.discard(proc)

    def stop_all(self) -> None:
        """Kill every running CLI's process group."""
        with self._lock:
            running = list(self._running)
        for proc in running:
            proc.stop()


def resume_point(ctx: TurnContext, key: str, continue_prompt: str) -> Tuple[Optional[str], str]:
    """The CLI session a run resumes (the session state's ``key``, when a non-empty string)
    and its prompt: ``continue_prompt`` for a turn cut by a restart after completed steps of
    that session, else the turn's own prompt."""
    data = ctx.state.data
    session_id = data.get(key) if isinstance(data, dict) else None
    session_id = session_id if isinstance(session_id, str) and session_id else None
    prompt = continue_prompt if ctx.completed_steps > 0 and session_id else ctx.prompt
    return session_id, prompt


def keep_session_id(ctx: TurnContext, key: str, session_id: Any) -> None:
    """Store the CLI's session id (a non-empty string) as the session state ``{key: id}``,
    unless the state holds it already."""
    if isinstance(session_id, str) and session_id:
        data = ctx.state.data
        if not isinstance(data, dict) or data.get(key) != session_id:
            ctx.set_state({key: session_id})


def summarize(text: Any, limit: int = 300) -> str:
    """One line of at most ``limit`` characters, for error messages."""
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def join_text(blocks: Any) -> str:
    """The text of a tool result's ``content``: a str as is, a list of blocks joined by their
    ``text`` fields (other blocks as JSON)."""
    if isinstance(blocks, str):
        return blocks
    if isinstance(blocks, list):
        out: List[str] = []
        for b in blocks:
            if isinstance(b, dict) and isinstance(b.get("text"), str):
                out.append(b["text"])
            else:
                out.append(json.dumps(b, ensure_ascii=False))
        return "\n".join(out)
    if blocks is None:
        return ""
    return json.dumps(blocks, ensure_ascii=False)

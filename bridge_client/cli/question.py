"""The terminal's question for ``bridge-client run --approve ask``: ``Allow shell: ls? [y]es/[n]o``.

The question is put and read by a thread of its own (``bridge-client-question``) while the
command's main thread goes on reading the turn. So an answer given elsewhere (another shell's
``bridge-client answer``, the approval timeout, a cancel) is seen as soon as its
``approval-answer`` part arrives: the question is withdrawn with a line that says who answered,
what was typed for it is discarded, and the next request is asked. The terminal is polled every
``poll`` seconds (0.1 by default), so a withdrawn question stops reading within that.

Requests are asked one at a time, oldest first. End of input (Ctrl-D) or Ctrl-C at the question
answers no.
"""
from __future__ import annotations

import contextlib
import os
import select
import threading
from collections import deque
from typing import Any, Callable, Deque, Iterator, Optional, Set, TextIO, Tuple

from ..wire.parts import ApprovalAnswer, ApprovalRequest, Part, StepReset, TurnFinish
from .approval_text import keys, parse_answer, question

__all__ = ["TerminalQuestions", "answered_by"]

Send = Callable[[ApprovalRequest, str, Optional[str]], None]
"""Sends a decision for a request: ``(request, decision, message)``."""


def answered_by(part: ApprovalAnswer) -> str:
    """How the withdrawn question says who answered: ``was answered elsewhere: allow-once by
    host``, ``was answered by the approval timeout: deny``, ..."""
    if part.by == "timeout":
        return f"was answered by the approval timeout: {part.decision}"
    if part.by == "cancel":
        return f"was answered by the turn's cancel: {part.decision}"
    return f"was answered elsewhere: {part.decision} by {part.by}"


class TerminalQuestions:
    """Asks approval requests at the terminal, one at a time, in a thread of its own.

    Args:
        send: sends the decision typed (called in the question's thread; it says itself when
            the bridge refuses it; any other error it raises is said on ``tty_out``).
        tty_in: where answers are read: a terminal (polled with ``select``), or a file-like
            object without a file descriptor (read line by line; for tests).
        tty_out: where the question is written (standard error).
        terminal: a context manager that holds the terminal while the question writes (the
            spinner's ``Progress.output``), or ``None``.
        poll: seconds between two looks at the terminal.

    :meth:`ask` queues a request; :meth:`seen` withdraws the question a part settles (call it
    before the part is shown); :meth:`interrupt` takes a Ctrl-C for the open question;
    :meth:`close` stops the thread. All may be called from the main thread while the question's
    thread runs.
    """

    def __init__(
        self,
        send: Send,
        tty_in: Optional[TextIO],
        tty_out: Optional[TextIO],
        *,
        terminal: Optional[Callable[[], Any]] = None,
        poll: float = 0.1,
    ) -> None:
        self._send = send
        self.tty_in = tty_in
        self.tty_out = tty_out
        self.terminal = terminal
        self.poll = poll
        self.held: Callable[[bool], None] = lambda held: None  # the spinner keeps off while asking
        self._lock = threading.RLock()
        self._wake = threading.Condition(self._lock)
        self._queue: Deque[ApprovalRequest] = deque()
        self._open: Optional[ApprovalRequest] = None
        self._mine: Set[str] = set()  # requests answered at this terminal
        self._ctrl_c = False
        self._sending = False  # a decision typed here is being sent
        self._stop = False
        self._thread: Optional[threading.Thread] = None
        self._fd = _fileno(tty_in)

    # ------------------------------------------------------------------ the main thread's side

    def ask(self, request: ApprovalRequest) -> None:
        """Queue ``request``; it is asked when the questions before it are settled."""
        with self._lock:
            if self._stop or request.request_id in self._mine:
                return
            if any(r.request_id == request.request_id for r in self._queue):
                return
            if self._open is not None and self._open.request_id == request.request_id:
                return
            self._queue.append(request)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="bridge-client-question", daemon=True)
                self._thread.start()
            self._wake.notify_all()

    def seen(self, part: Part) -> None:
        """Withdraw the questions ``part`` settles: an answer not typed here, a ``step-reset``
        of their attempt, ``turn-finish``. Call it before ``part`` is shown."""
        if isinstance(part, ApprovalAnswer):
            if part.request_id not in self._mine:
                self._withdraw(lambda r: r.request_id == part.request_id, answered_by(part))
        elif isinstance(part, StepReset):
            dropped = (part.step, part.discarded_attempt)
            self._withdraw(
                lambda r: (r.step, r.attempt) == dropped,
                f"is no longer pending: step {part.step} restarted",
            )
        elif isinstance(part, TurnFinish):
            self._withdraw(lambda r: True, "is no longer pending: the turn finished")

    def interrupt(self) -> bool:
        """Ctrl-C (from the signal handler): True when a question is open, which it answers
        no; False when none is (the Ctrl-C is the command's). Takes no lock."""
        if self._open is None or self._stop:
            return False
        self._ctrl_c = True
        return True

    @property
    def asking(self) -> bool:
        """True while a question is open or queued."""
        with self._lock:
            return self._open is not None or bool(self._queue)

    def settle(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until no question is open, queued or being answered;
        True if so."""
        with self._wake:
            return self._wake.wait_for(
                lambda: self._open is None and not self._queue and not self._sending, timeout
            )

    def close(self) -> None:
        """Stop asking (the turn ended or is suspended): an open question's line is ended, the
        queue dropped, the thread joined. Idempotent."""
        with self._hold(), self._lock:
            self._stop = True
            if self._open is not None:
                self._say("")
                self._open = None
                self.held(False)
            self._queue.clear()
            self._wake.notify_all()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2.0)

    # ------------------------------------------------------------------ the question's thread

    def _run(self) -> None:
        while True:
            with self._wake:  # idle: wait for a request, holding nothing else
                while not self._stop and self._open is None and not self._queue:
                    self._wake.notify_all()  # settled
                    self._wake.wait(self.poll)
                if self._stop:
                    return
            with self._hold(), self._wake:
                if self._stop:
                    return
                if self._open is None:
                    if not self._queue:
                        continue
                    self._open = self._queue.popleft()
                    self._ctrl_c = False
                    self.held(True)
                    self._say(question(self._open), end="")
                current = self._open
            line = self._poll_line() if not self._ctrl_c else None
            with self._hold(), self._wake:
                if self._open is not current or self._stop:
                    continue  # withdrawn meanwhile: said already
                decided = self._decide(current, line)
                if decided is None:
                    continue
                self._mine.add(current.request_id)
                self._open, self._sending = None, True
                self.held(False)
            try:
                self._send(current, decided[0], decided[1])
            except Exception as exc:  # noqa: BLE001  this thread must not die with a traceback
                # (the bridge unavailable, the session released: the turn's reader says so too)
                with self._hold(), self._lock:
                    rid = current.request_id
                    self._say(f"bridge-client: the answer to request {rid} was not sent: {exc}")
            finally:
                with self._wake:
                    self._sending = False
                    self._wake.notify_all()

    def _decide(self, request: ApprovalRequest, line: Optional[str]) -> Optional[Tuple[str, Optional[str]]]:
        if self._ctrl_c:
            self._say("no (Ctrl-C)")
            return "deny", "denied at the terminal (Ctrl-C)"
        if line is None:
            return None
        if not line:
            self._say("no (end of input)")
            return "deny", "denied at the terminal (end of input)"
        decision = parse_answer(line, request.choices)
        if decision is not None:
            return decision, None
        self._say("please answer " + keys(request.choices).replace("[", "").replace("]", ""))
        self._say(question(request), end="")
        return None

    def _poll_line(self) -> Optional[str]:
        """What was typed: a line, ``""`` at end of input, ``None`` when nothing yet."""
        if self._fd is None:
            return self.tty_in.readline() if self.tty_in is not None else ""
        try:
            ready, _, _ = select.select([self._fd], [], [], self.poll)
            if not ready:
                return None
            data = os.read(self._fd, 4096)
        except InterruptedError:
            return None
        except (OSError, ValueError):  # the terminal went away: as end of input
            return ""
        return data.decode("utf-8", "replace")

    # ------------------------------------------------------------------ shared

    def _withdraw(self, which: Callable[[ApprovalRequest], bool], why: str) -> None:
        with self._hold(), self._lock:
            self._queue = deque(r for r in self._queue if not which(r))
            current = self._open
            if current is not None and which(current):
                self._say("")
                self._say(f"bridge-client: request {current.request_id} {why}")
                self._open = None
                self.held(False)
                self._discard_typed()
            self._wake.notify_all()

    def _discard_typed(self) -> None:
        """Drop what was typed for a withdrawn question, so that it cannot answer the next."""
        if self._fd is None:
            return
        try:
            import termios
        except ImportError:  # no terminals here (Windows)
            return
        try:
            termios.tcflush(self._fd, termios.TCIFLUSH)
        except (termios.error, OSError, ValueError):  # not a terminal (a pipe): nothing to drop
            pass

    @contextlib.contextmanager
    def _hold(self) -> Iterator[None]:
        if self.terminal is None:
            yield
        else:
            with self.terminal():
                yield

    def _say(self, text: str, end: str = "\n") -> None:
        if self.tty_out is not None:
            try:
                self.tty_out.write(text + end)
                self.tty_out.flush()
            except (OSError, ValueError):
                pass


def _fileno(stream: Optional[TextIO]) -> Optional[int]:
    """The file descriptor of ``stream`` when it has one, else ``None``."""
    try:
        return stream.fileno() if stream is not None else None
    except (AttributeError, OSError, ValueError):
        return None

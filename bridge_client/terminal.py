"""What the ``bridge-client`` command shows on a terminal, and only there: colour (unless
``NO_COLOR`` is set, https://no-color.org) and a spinner with the seconds of silence while a
turn sends nothing. Piped or redirected output gets neither, so machines read plain text.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Iterator, Optional, TextIO

__all__ = ["is_terminal", "colour_enabled", "Colours", "Progress"]


def is_terminal(stream: Optional[TextIO]) -> bool:
    """True when ``stream`` is open and attached to a terminal."""
    if stream is None:
        return False
    try:
        return bool(stream.isatty()) and not getattr(stream, "closed", False)
    except (AttributeError, ValueError, OSError):
        return False


def colour_enabled(stream: Optional[TextIO]) -> bool:
    """Colour goes to a terminal only: not when ``NO_COLOR`` is set to anything non-empty,
    nor when ``TERM`` is ``dumb``."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("TERM") == "dumb":
        return False
    return is_terminal(stream)


class Colours:
    """ANSI styles, or empty strings when colour is off.

    Args:
        enabled: whether to emit escape sequences.
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def _wrap(self, code: str, text: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.enabled else text

    def tool(self, text: str) -> str:
        """A tool call's marker (cyan)."""
        return self._wrap("36", text)

    def ok(self, text: str) -> str:
        """Success (green)."""
        return self._wrap("32", text)

    def bad(self, text: str) -> str:
        """Failure (red)."""
        return self._wrap("31", text)

    def note(self, text: str) -> str:
        """Something to notice, like a restarted step (yellow)."""
        return self._wrap("33", text)

    def dim(self, text: str) -> str:
        """Secondary text, like an agent's reasoning (faint)."""
        return self._wrap("2", text)


_FRAMES = "|/-\\"


class Progress:
    """A spinner and the seconds since the last output, on ``stream`` (stderr), shown only
    while nothing has arrived for ``quiet`` seconds, and only when ``stream`` is a terminal.

    One daemon thread (``bridge-client-progress``) draws it every ``interval`` seconds;
    :meth:`output` wraps every write of the turn's own output, which first erases the
    spinner's line. :meth:`close` stops the thread and erases the line.

    Args:
        stream: where to draw (a terminal, else nothing is drawn and no thread starts).
        quiet: seconds of silence before the spinner appears.
        interval: seconds between two frames.
    """

    def __init__(self, stream: Optional[TextIO], *, quiet: float = 1.0, interval: float = 0.1) -> None:
        self.stream = stream
        self.enabled = is_terminal(stream)
        self.quiet = quiet
        self.interval = interval
        self.label = "connecting"
        self.may_draw = True  # False while the output's cursor is mid-line on the same terminal
        self.held = False  # True while a question waits for an answer on the terminal
        self._lock = threading.Lock()
        self._last = time.monotonic()
        self._shown = False
        self._frame = 0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        if self.enabled:
            self._thread = threading.Thread(target=self._run, name="bridge-client-progress", daemon=True)
            self._thread.start()

    @contextlib.contextmanager
    def output(self, label: Optional[str] = None) -> Iterator[None]:
        """Erase the spinner, let the caller write, and count that as output (the silence
        starts again). ``label`` names what is awaited next, e.g. ``"waiting for the agent"``."""
        with self._lock:
            self._erase()
            try:
                yield
            finally:
                self._last = time.monotonic()
                if label is not None:
                    self.label = label

    def close(self) -> None:
        """Stop drawing and erase the line. Idempotent."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2.0)
        with self._lock:
            self._erase()

    def _erase(self) -> None:
        if self._shown and self.stream is not None:
            try:
                self.stream.write("\r\033[K")
                self.stream.flush()
            except (OSError, ValueError):
                pass
            self._shown = False

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                silent = time.monotonic() - self._last
                if silent < self.quiet or not self.may_draw or self.held or self.stream is None:
                    continue
                self._frame = (self._frame + 1) % len(_FRAMES)
                try:
                    self.stream.write(f"\r\033[K{_FRAMES[self._frame]} {self.label}, {silent:.0f} s")
                    self.stream.flush()
                except (OSError, ValueError):
                    return
                self._shown = True

"""What the ``bridge-client`` command writes: its own lines on stdout and stderr, and a turn's
parts as people read them (text as it arrives, tools and reasoning marked, coloured on a
terminal). ``--json`` writes each part's JSON instead (see :mod:`bridge_client.cli.stream`).
"""
from __future__ import annotations

import json
import logging
import signal
import sys
import unicodedata
from typing import Any, TextIO

from ..terminal import Colours, colour_enabled
from ..wire.parts import (
    Data,
    Part,
    ReasoningDelta,
    StepReset,
    TextDelta,
    ToolCall,
    ToolResult,
    TurnFinish,
)
from .approval_text import describe
from .exits import OutputError

__all__ = ["print_err", "print_out", "log_to_stderr", "Printer"]


def print_err(line: str) -> None:
    """Print one line on stderr, if there is one."""
    if sys.stderr is not None:
        try:
            print(line, file=sys.stderr)
        except OSError:
            pass


def print_out(line: str) -> None:
    """Print one line of the command's output on stdout. Raises OutputError."""
    try:
        print(line, flush=True)
    except OSError as exc:
        raise OutputError(exc) from None


def log_to_stderr() -> None:
    """``-v``: the ``bridge_client`` logger's DEBUG lines on stderr; other libraries' loggers
    stay as they are (the root logger is not configured)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s bridge-client: %(message)s"))
    logger = logging.getLogger("bridge_client")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)


def _visible(text: str) -> str:
    """``text`` with its control and format characters shown escaped (``\\x1b``, ``\\x00``,
    ``\\r``, ``\\u202e``) except newlines and tabs: a tool call's command is shown as it
    will run, and an escape sequence or carriage return in it cannot repaint the line."""
    return "".join(
        ch if ch in "\n\t" or unicodedata.category(ch) not in ("Cc", "Cf")
        else ch.encode("unicode_escape").decode("ascii")
        for ch in text
    )


def _killed_by(output: Any) -> str:
    """``"killed by signal 15 (SIGTERM) "`` for a tool result whose ``exitCode`` is negative
    (the shell driver's way of saying a signal ended the command), else ``""``."""
    code = output.get("exitCode") if isinstance(output, dict) else None
    if not isinstance(code, int) or isinstance(code, bool) or code >= 0:
        return ""
    try:
        name = f" ({signal.Signals(-code).name})"
    except ValueError:
        name = ""
    return f"killed by signal {-code}{name} "


class Printer:
    """Shows parts as people read them: text as it arrives, reasoning marked ``[thinking]``
    (and dim), tools and driver data (``[codex-error] ...``) marked, a final line; markers
    coloured when ``out`` is a terminal and ``NO_COLOR`` is not set."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.at_line_start = True
        self.thinking = False  # the last text written was reasoning
        self.c = Colours(colour_enabled(out))

    def _line(self, text: str) -> None:
        if not self.at_line_start:
            self.out.write("\n")
        self.out.write(text + "\n")
        self.at_line_start = True
        self.thinking = False

    def _text(self, text: str, reasoning: bool) -> None:
        if reasoning != self.thinking:
            if not self.at_line_start:
                self.out.write("\n")
            if reasoning:
                self.out.write(self.c.dim("[thinking]") + " ")
            self.thinking = reasoning
        self.out.write(self.c.dim(text) if reasoning else text)
        self.at_line_start = text.endswith("\n")

    def show(self, part: Part) -> None:
        """Write ``part`` to ``out`` (nothing for parts people need not see) and flush."""
        if isinstance(part, (TextDelta, ReasoningDelta)):
            if part.text:
                self._text(part.text, isinstance(part, ReasoningDelta))
        elif isinstance(part, ToolCall):
            shown = part.input.get("command") if isinstance(part.input, dict) else None
            marker = self.c.tool(f"[{part.tool_name}]")
            self._line(f"{marker} {_visible(shown) if isinstance(shown, str) else json.dumps(part.input)}")
        elif isinstance(part, ToolResult):
            if part.is_error:
                marker = self.c.bad(f"[{part.tool_name} error]")
            else:
                marker = self.c.ok(f"[{part.tool_name} ok]")
            shown = json.dumps(part.output, ensure_ascii=False)[:200]
            self._line(f"{marker} {_killed_by(part.output)}{shown}")
        elif isinstance(part, Data):
            paint = self.c.bad if "error" in part.name.lower() else self.c.note
            shown = part.data if isinstance(part.data, str) else json.dumps(part.data, ensure_ascii=False)
            self._line(f"{paint(f'[{part.name}]')} {shown[:500]}")
        elif isinstance(part, StepReset):
            note = f"[step {part.step} restarted: {part.reason}; what it printed above is void]"
            self._line(self.c.note(note))
        elif isinstance(part, TurnFinish):
            reason = part.finish_reason + (f": {part.error}" if part.error else "")
            paint = self.c.ok if part.finish_reason == "stop" else self.c.bad
            self._line(f"{paint('[finished]')} {reason}")
        else:
            line = describe(part, self.c)  # requests, answers, user messages
            if line is not None:
                self._line(line)
        self.out.flush()

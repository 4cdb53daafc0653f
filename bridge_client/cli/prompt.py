"""Prompts for ``bridge-client run`` (and messages for ``bridge-client say``): from the
command line, a file (``@FILE``) or standard input (``-``).

A prompt of several megabytes cannot go through argv (the system caps the size of a
command line), so ``@FILE`` and ``-`` read it instead. Sizes are checked before anything is
sent: a prompt is at most 4 MiB of UTF-8 (the protocol's limit), and a larger one is refused
with its size, not cut.
"""
from __future__ import annotations

import os
import sys
from typing import BinaryIO, List, Optional, Sequence

from ..wire.rpcs import MAX_PROMPT_BYTES
from .exits import UsageError

__all__ = ["PromptError", "read_prompt", "check_utf8", "PROMPT_HELP"]

PROMPT_HELP = (
    "the prompt; several are joined as lines. '-' reads it from standard input, @FILE from "
    "FILE (write @@ for a prompt that starts with @). At most 4 MiB of UTF-8 in all"
)


class PromptError(Exception):
    """A prompt that cannot be read or is too large (bad command-line input)."""


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB"


def _too_large(what: str, size: int) -> PromptError:
    return PromptError(
        f"{what} is {size} bytes ({_mib(size)}); a prompt is at most {MAX_PROMPT_BYTES} bytes "
        "(4 MiB) of UTF-8: shorten it, or give the agent a file to read instead"
    )


def _decode(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PromptError(
            f"{what} is not valid UTF-8 (byte 0x{data[exc.start]:02x} at position {exc.start})"
        ) from None


def _read_stream(stream: BinaryIO, what: str) -> str:
    try:
        data = stream.read(MAX_PROMPT_BYTES + 1)  # one byte more tells "too large" without reading it all
        if len(data) > MAX_PROMPT_BYTES:
            raise _too_large(what, len(data) + len(stream.read()))
    except OSError as exc:  # e.g. a standard input opened for writing only (EBADF)
        raise PromptError(f"cannot read {what}: {exc.strerror or exc}") from None
    return _decode(data, what)


def _standard_input() -> BinaryIO:
    """The process's standard input as bytes; a closed one (``<&-``: Python then has no
    ``sys.stdin``) is bad input, not a crash."""
    if sys.stdin is None:
        raise PromptError(
            "'-' reads standard input, but it is closed: give the text as words, @FILE, "
            "or pipe it in"
        )
    return sys.stdin.buffer


def _read_file(path: str) -> str:
    what = f"the prompt file {path}"
    try:
        size = os.stat(path).st_size
        if os.path.isfile(path) and size > MAX_PROMPT_BYTES:
            raise _too_large(what, size)
        with open(path, "rb") as f:
            return _read_stream(f, what)
    except OSError as exc:
        raise PromptError(f"cannot read the prompt file {path}: {exc.strerror or exc}") from None


def read_prompt(words: Sequence[str], stdin: Optional[BinaryIO] = None) -> str:
    """Join the ``PROMPT`` words of ``run`` into one prompt, one word a line.

    A word ``-`` is replaced by standard input (read once), ``@FILE`` by the file's text,
    ``@@TEXT`` by ``@TEXT``; other words are taken as they are.

    Args:
        words: the words as given on the command line.
        stdin: where ``-`` reads (default: the process's standard input, as bytes).

    Raises:
        PromptError: a file or standard input cannot be read (or is closed), ``-`` is given
            twice, the text is not UTF-8, or the prompt is over 4 MiB of UTF-8.
    """
    parts: List[str] = []
    read_stdin = False
    for word in words:
        if word == "-":
            if read_stdin:
                raise PromptError("'-' (standard input) can be given once")
            read_stdin = True
            stream = stdin if stdin is not None else _standard_input()
            if stdin is None and sys.stdin.isatty():  # else it looks like a hang
                print(
                    "bridge-client: reading standard input from the terminal: end it with Ctrl-D",
                    file=sys.stderr,
                    flush=True,
                )
            parts.append(_read_stream(stream, "the prompt on standard input"))
        elif word.startswith("@@"):
            parts.append(word[1:])
        elif word.startswith("@") and len(word) > 1:
            parts.append(_read_file(word[1:]))
        else:
            parts.append(word)
    prompt = "\n".join(parts)
    size = len(prompt.encode("utf-8", "surrogateescape"))
    if size > MAX_PROMPT_BYTES:
        raise _too_large("the prompt", size)
    return prompt


def check_utf8(prompt: str) -> None:
    """Refuse a prompt whose bytes, as typed, are not UTF-8: Python turns such argv bytes into
    lone surrogates (PEP 383), which no frame can carry.

    Raises:
        UsageError: naming the first bad byte and its position in the bytes typed (exit 2).
    """
    try:
        prompt.encode("utf-8")
        return
    except UnicodeEncodeError:
        pass
    raw = prompt.encode("utf-8", "surrogateescape")  # the bytes as the user typed them
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"the prompt is not valid UTF-8 (byte 0x{raw[exc.start]:02x} at position {exc.start})"
        ) from None
    raise UsageError("the prompt is not valid UTF-8")  # a surrogate that came from elsewhere

"""The upgrade's credentials kept out of logs (see :doc:`protocol`, "Connection").

The WebSocket libraries log the upgrade request's headers at DEBUG level (websockets' server
always, websocket-client when its trace is on), ``Authorization: Bearer <token>`` included.
:class:`RedactAuthorization` is a :class:`logging.Filter` that rewrites such records before
any handler sees them. Sans-I/O: it only edits log records.
"""
from __future__ import annotations

import logging
import re
from typing import Iterable

__all__ = ["RedactAuthorization", "redact_library_loggers", "LIBRARY_LOGGERS"]

LIBRARY_LOGGERS = ("websockets.server", "websockets.client", "websocket")
"""The loggers of websockets (server and client) and websocket-client that log headers."""

_HEADER = re.compile(r"(?im)^(\W*(?:proxy-)?authorization\s*:\s*).*$")
_MARK = "[redacted]"


class RedactAuthorization(logging.Filter):
    """Replace the value of every ``Authorization`` (and ``Proxy-Authorization``) header line
    in a log record with ``[redacted]``; records without one pass unchanged. Never drops a
    record and never raises."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite ``record`` in place when its message holds a credentials header."""
        try:
            text = record.getMessage()
        except Exception:  # a record whose args do not fit its format: leave it to logging
            return True
        if "uthorization" not in text and "UTHORIZATION" not in text:
            return True
        redacted = _HEADER.sub(lambda m: m.group(1) + _MARK, text)
        if redacted != text:
            record.msg, record.args = redacted, ()
        return True


_FILTER = RedactAuthorization()


def redact_library_loggers(names: Iterable[str] = LIBRARY_LOGGERS) -> None:
    """Attach the one :class:`RedactAuthorization` filter to each named logger (idempotent)."""
    for name in names:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)

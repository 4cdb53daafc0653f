"""How the ``bridge-client`` command ends: the exceptions its commands raise and the exit
status each one means (:func:`bridge_client.cli.main` turns them into one line on stderr).

0 for a command that did its job, 1 for a failure, 2 for bad command-line input, 130 after
Ctrl-C and 143 after SIGTERM (128 + the signal), 70 for an unexpected error (a bug).
"""
from __future__ import annotations

import signal

__all__ = ["UsageError", "Failure", "OutputError", "Stopped", "INTERNAL_ERROR"]


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit status 2."""


class Failure(Exception):
    """A command that could not do its job (not bad input): one line, exit status 1."""


class OutputError(Exception):
    """Writing the command's own output failed (stdout closed or full): exit status 1."""

    def __init__(self, error: OSError) -> None:
        super().__init__(error.strerror or str(error))
        self.error = error


class Stopped(KeyboardInterrupt):
    """SIGTERM while a turn streams: suspended like Ctrl-C, exit status 128 + 15."""

    signum = int(signal.SIGTERM)


INTERNAL_ERROR = 70
"""Exit status for an unexpected error inside bridge-client (``EX_SOFTWARE``)."""

"""The install step of a template (:mod:`bridge_client.template`), and what the steps share:
the tail of a failed command's output for the error, the line that announces an install.

Kept below the template and the steps that extend it (:mod:`.wheelhouse`, :mod:`.npm`), which
the template's factories import: every arrow points down to this module. The public home of
:class:`TemplateStep` stays :mod:`bridge_client.template`.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import posixpath
import sys
from dataclasses import dataclass
from typing import Tuple

from .base import ExecResult, Sandbox

__all__ = ["TemplateStep", "MARKS_DIR", "output_tail", "announce_install"]

_TAIL_BYTES = 2000

MARKS_DIR = "template-marks"
"""The folder under a sandbox's state root that holds the markers of remembered steps."""


def output_tail(result: ExecResult) -> str:
    """The last 2000 bytes of a command's stdout and stderr, as text: for a step's error."""
    text = (result.stdout + result.stderr)[-_TAIL_BYTES:]
    return text.decode("utf-8", "replace").strip()


def announce_install(what: str, where: str) -> None:
    """Say on stderr, in one line, that ``what`` is being installed into ``where``."""
    print(f"bridge-client: installing {what} into {where}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class TemplateStep:
    """One install step.

    Attributes:
        name: what the step provides, for messages ("the bridge program").
        check: a command that exits 0 when the sandbox already has it.
        install: a command that provides it.
        timeout: seconds each command may take.
        remember: once the check passed, leave a marker in the sandbox's state root and skip
            the step while it is there (for a check that is slow, such as starting an
            interpreter, and whose loss the bridge's start shows: see
            :class:`~bridge_client.template.Template`).
    """

    name: str
    check: Tuple[str, ...]
    install: Tuple[str, ...]
    timeout: float = 600.0
    remember: bool = False

    def marker(self) -> bytes:
        """The content of this step's marker: canonical JSON of the step's kind and fields
        (``timeout`` aside) and of this package's version."""
        from .. import __version__

        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "timeout"}
        kind = f"{type(self).__module__}.{type(self).__qualname__}"
        text = json.dumps({"kind": kind, "fields": fields, "package": __version__}, sort_keys=True,
                          separators=(",", ":"), default=list)
        return text.encode("utf-8")

    def marker_path(self, sandbox: Sandbox) -> str:
        """Where this step's marker lives in ``sandbox``: a file named by a digest of
        :meth:`marker` in ``<state_root>/template-marks``."""
        digest = hashlib.sha256(self.marker()).hexdigest()[:32]
        return posixpath.join(sandbox.state_root, MARKS_DIR, digest)


# Where users import it, and what a marker names as the plain step's kind (markers left by
# earlier releases stay valid).
TemplateStep.__module__ = "bridge_client.template"

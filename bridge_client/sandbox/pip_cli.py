"""The template step that installs an agent CLI published on PyPI (Aider, Mistral Vibe) when
the sandbox lacks it: into a venv of its own under the sandbox's state root,
``<state root>/agents/<package>@<version>`` (the same place as a private npm prefix, see
:mod:`.npm`), in every kind of sandbox, never into a system Python. The venv is made with
the newest ``python3.N`` the sandbox has that is recent enough for the CLI (Mistral Vibe
needs 3.12 or later); two installers of the same venv wait for each other (a file lock).

The drivers find the program in the venv's ``bin`` when it is not on ``PATH``
(:func:`bridge_client.drivers.cli_install.find_cli`).
"""

from __future__ import annotations

import posixpath
import shlex
from dataclasses import dataclass
from typing import Tuple

from ..errors import SandboxGone, TemplateError
from .base import Sandbox
from .npm import _LOCKED, private_prefix
from .template_step import TemplateStep, announce_install, output_tail

__all__ = ["PipCliStep", "PY_AGENT_CLIS"]

PY_AGENT_CLIS = {
    "aider": ("Aider (aider)", "aider", "aider-chat", "0.86.2", (3, 10)),
    "vibe": ("Mistral Vibe (vibe-acp)", "vibe-acp", "mistral-vibe", "3.0.2", (3, 12)),
}
"""Driver name to (what, program, PyPI package, version, the oldest Python it runs on): the
versions proven with each driver, which the template installs."""

# $1: the venv; $2: the requirement; $3: the oldest minor version of Python 3 it runs on.
# Exit 3: no Python 3 recent enough.
_MAKE_VENV = (
    'venv=$1; req=$2; oldest=$3; py=; '
    'for m in 14 13 12 11 10; do [ "$m" -ge "$oldest" ] || continue; '
    'if command -v "python3.$m" >/dev/null 2>&1 && "python3.$m" -c "" >/dev/null 2>&1; '
    'then py=python3.$m; break; fi; done; '
    'if [ -z "$py" ] && python3 -c "import sys; sys.exit(sys.version_info[1] < $oldest)" >/dev/null 2>&1; '
    'then py=python3; fi; '
    '[ -n "$py" ] || { echo "no Python 3.$oldest or later" >&2; exit 3; }; '
    'rm -rf "$venv" && "$py" -m venv "$venv" && "$venv/bin/python" -m pip install --quiet "$req"'
)


@dataclass(frozen=True)
class PipCliStep(TemplateStep):
    """Install ``package==version`` from PyPI into its private venv unless the sandbox has
    ``program``; :meth:`Template.run <bridge_client.template.Template.run>` calls its
    :meth:`run`. Make one with :meth:`for_cli`.

    Attributes:
        program: the CLI's program name; package, version: the PyPI package and version.
        oldest: the oldest Python (major, minor) the CLI runs on.
    """

    program: str = ""
    package: str = ""
    version: str = ""
    oldest: Tuple[int, int] = (3, 10)

    @classmethod
    def for_cli(
        cls, name: str, program: str, package: str, version: str, oldest: Tuple[int, int]
    ) -> "PipCliStep":
        """The step for ``program`` from ``package==version`` (``name``: for messages)."""
        return cls(
            name=name,
            check=("/bin/sh", "-c", f"command -v {shlex.quote(program)}"),
            install=("python3", "-m", "venv", "..."),  # a description: run() builds the command
            timeout=1200.0,
            program=program,
            package=package,
            version=version,
            oldest=tuple(oldest),  # type: ignore[arg-type]
        )

    def venv(self, sandbox: Sandbox) -> str:
        """The CLI's venv in ``sandbox``: ``<state root>/agents/<package>@<version>``."""
        return private_prefix(sandbox.state_root, self.package, self.version)

    def run(self, sandbox: Sandbox) -> None:
        """Install the CLI unless the sandbox has it (on ``PATH`` or in its venv).

        Raises:
            TemplateError: no Python recent enough, pip fails or times out, or the program
                is still missing afterwards.
            SandboxGone: the sandbox is gone.
        """
        venv = self.venv(sandbox)
        program = posixpath.join(venv, "bin", self.program)
        if self._ok(sandbox, self.check) or self._ok(sandbox, ("test", "-x", program)):
            return
        announce_install(f"{self.package}=={self.version} (PyPI, {self.name})", venv)
        ready = shlex.join(("test", "-x", program))
        make = ["sh", "-c", _MAKE_VENV, "sh", venv, f"{self.package}=={self.version}", str(self.oldest[1])]
        try:
            argv = ["sh", "-c", _LOCKED, "sh", venv + ".lock", ready, *make]
            done = sandbox.exec(argv, timeout=self.timeout)
        except SandboxGone:
            raise
        except (OSError, TimeoutError) as exc:
            message = f"{self.name}: installing {self.package} failed: {exc}"
            raise TemplateError(message, step=self.name) from exc
        if done.exit_code == 3:
            raise TemplateError(
                f"{self.name}: the sandbox has no Python {self.oldest[0]}.{self.oldest[1]} or later "
                f"(install one there, or {self.name} itself)",
                step=self.name,
                output=output_tail(done),
            )
        if not done.ok:
            raise TemplateError(
                f"installing {self.name} failed (exit {done.exit_code}): "
                f"pip install {self.package}=={self.version}",
                step=self.name,
                output=output_tail(done),
            )
        if not self._ok(sandbox, ("test", "-x", program)):
            message = f"{self.name} is still missing after installing it: {program}"
            raise TemplateError(message, step=self.name)

    def _ok(self, sandbox: Sandbox, argv: Tuple[str, ...]) -> bool:
        try:
            return sandbox.exec(list(argv), timeout=60.0).ok
        except SandboxGone:
            raise
        except (OSError, TimeoutError):
            return False

"""The template step that installs an agent's CLI from npm when the sandbox lacks it, without
touching the user's machine: for a :class:`~bridge_client.sandbox.LocalSandbox` (no
isolation: the sandbox *is* the user's machine) into a private prefix under the sandbox's
state root, ``<state root>/agents/<package>@<version>`` (never ``npm install -g``); in any
other sandbox (a container) into that sandbox's global npm prefix. Every install says on
stderr, in one line, what it installs and where.

The drivers find the private copy themselves when the program is not on ``PATH`` (see the
*Drivers* page, ``drivers/index``). A driver given an ``executable`` gets no install
step at all (:func:`bridge_client.template.agent_cli_steps`).
"""

from __future__ import annotations

import json
import posixpath
import shlex
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

from ..errors import SandboxGone, TemplateError
from .base import Sandbox
from .template_step import TemplateStep, announce_install, output_tail

__all__ = [
    "NpmCliStep",
    "IsolationStep",
    "AGENT_CLIS",
    "ISOLATION_FILE",
    "private_prefix",
    "announce_install",
]

ISOLATION_FILE = "agents/sandbox.json"
"""Under the state root: ``{"isolated": true}`` when the sandbox is isolated from the user's
machine (written by :class:`IsolationStep`; read by the CLI drivers to choose their default
permission mode)."""

AGENT_CLIS = {
    "claude-code": ("the Claude Code CLI (claude)", "claude", "@anthropic-ai/claude-code", "2.1.332"),
    "codex": ("the Codex CLI (codex)", "codex", "@openai/codex", "0.171.0"),
    "gemini": ("the Gemini CLI (gemini)", "gemini", "@google/gemini-cli", "0.61.0"),
    "qwen": ("the Qwen Code CLI (qwen)", "qwen", "@qwen-code/qwen-code", "0.24.4"),
    "pi": ("the pi coding agent (pi)", "pi", "@mariozechner/pi-coding-agent", "0.73.1"),
    "opencode": ("OpenCode (opencode)", "opencode", "opencode-ai", "1.18.33"),
    "copilot": ("the GitHub Copilot CLI (copilot)", "copilot", "@github/copilot", "1.0.102"),
    "codex-acp": ("Zed's codex-acp (codex-acp)", "codex-acp", "@zed-industries/codex-acp", "0.16.0"),
    "cline": ("the Cline CLI (cline)", "cline", "cline", "3.0.65"),
}
"""Driver name to (what, program, npm package, version): the versions proven with each
driver (the *Drivers* page, ``drivers/index``), which the template installs."""


# Runs argv while holding a lock file (flock, where the sandbox has it), unless `ready` (a
# shell test) says another installer finished while this one waited: two hosts that find the
# CLI missing at once run npm into one prefix once, not twice at the same moment.
_LOCKED = (
    'lock=$1; ready=$2; shift 2; (umask 077; mkdir -p "${lock%/*}") || exit 1; '
    'exec 9>>"$lock" || exit 1; '
    'if command -v flock >/dev/null 2>&1; then flock -w 900 9 || exit 1; fi; '
    'if sh -c "$ready" >/dev/null 2>&1; then exit 0; fi; '
    'exec "$@"'
)


def private_prefix(state_root: str, package: str, version: str) -> str:
    """The private npm prefix of ``package`` at ``version`` in a sandbox without isolation:
    ``<state_root>/agents/<package>@<version>`` (the ``/`` of a scope becomes ``+``)."""
    return posixpath.join(state_root, "agents", f"{package.replace('/', '+')}@{version}")


@dataclass(frozen=True)
class NpmCliStep(TemplateStep):
    """Install ``package@version`` from npm unless the sandbox has ``program``;
    :meth:`Template.run <bridge_client.template.Template.run>` calls its :meth:`run`. Make
    one with :meth:`for_cli`.

    Attributes:
        name: what the step provides, for messages.
        check: ``command -v PROGRAM`` (the private prefix is checked too, see :meth:`run`).
        install: the command for an isolated sandbox (``npm install -g``); a
            ``LocalSandbox`` gets :meth:`install_argv` instead.
        program: the CLI's program name.
        package, version: the npm package and the version installed.
    """

    program: str = ""
    package: str = ""
    version: str = ""

    @classmethod
    def for_cli(cls, name: str, program: str, package: str, version: str) -> "NpmCliStep":
        """The step for ``program`` from ``package@version`` (``name``: for messages)."""
        return cls(
            name=name,
            check=("/bin/sh", "-c", f"command -v {shlex.quote(program)}"),
            install=("npm", "install", "-g", "--no-fund", "--no-audit", f"{package}@{version}"),
            timeout=900.0,
            program=program,
            package=package,
            version=version,
        )

    def install_argv(self, sandbox: Sandbox) -> Tuple[str, ...]:
        """The npm command for ``sandbox``: ``--prefix`` the private prefix for a
        ``LocalSandbox``, ``-g`` elsewhere."""
        spec = f"{self.package}@{self.version}"
        if _isolated(sandbox):
            return self.install
        prefix = private_prefix(sandbox.state_root, self.package, self.version)
        return ("npm", "install", "--prefix", prefix, "--no-save", "--no-fund", "--no-audit", spec)

    def private_program(self, sandbox: Sandbox) -> Optional[str]:
        """The program's path in the private prefix (``LocalSandbox`` only, else ``None``)."""
        if _isolated(sandbox):
            return None
        prefix = private_prefix(sandbox.state_root, self.package, self.version)
        return posixpath.join(prefix, "node_modules", ".bin", self.program)

    def run(self, sandbox: Sandbox) -> None:
        """Install the CLI unless the sandbox has it (on ``PATH`` or in the private prefix).

        Raises:
            TemplateError: npm is missing, fails, times out, or the program is still missing.
            SandboxGone: the sandbox is gone.
        """
        private = self.private_program(sandbox)
        if self._ok(sandbox, self.check) or (private and self._ok(sandbox, ("test", "-x", private))):
            return
        argv = self.install_argv(sandbox)
        where = posixpath.dirname(posixpath.dirname(posixpath.dirname(private))) if private else (
            f"the global npm prefix of the sandbox {sandbox.id}"
        )
        announce_install(f"{self.package}@{self.version} (npm, {self.name})", where)
        lock = private_prefix(sandbox.state_root, self.package, self.version) + ".lock"
        if private:
            ready = shlex.join(("test", "-x", private))
        elif tuple(self.check[:2]) == ("/bin/sh", "-c") and len(self.check) == 3:
            ready = self.check[2]
        else:
            ready = shlex.join(self.check)
        try:
            done = sandbox.exec(["sh", "-c", _LOCKED, "sh", lock, ready, *argv], timeout=self.timeout)
        except SandboxGone:
            raise
        except TimeoutError as exc:
            raise TemplateError(
                f"{self.name}: {shlex.join(argv)} ran longer than {self.timeout} s", step=self.name
            ) from exc
        except OSError as exc:
            raise TemplateError(
                f"{self.name}: cannot run npm: {exc.strerror or exc} (install Node.js and npm there, "
                f"or {self.name} itself)",
                step=self.name,
            ) from exc
        if done.exit_code == 127:  # the shell found no npm to exec
            raise TemplateError(
                f"{self.name}: cannot run npm: not found (install Node.js and npm there, "
                f"or {self.name} itself)",
                step=self.name,
                output=output_tail(done),
            )
        if not done.ok:
            raise TemplateError(
                f"installing {self.name} failed (exit {done.exit_code}): {shlex.join(argv)}",
                step=self.name,
                output=output_tail(done),
            )
        check: Sequence[str] = ("test", "-x", private) if private else self.check
        if not self._ok(sandbox, check):
            message = f"{self.name} is still missing after installing it: {shlex.join(check)} failed"
            raise TemplateError(message, step=self.name)

    def _ok(self, sandbox: Sandbox, argv: Sequence[str]) -> bool:
        try:
            return sandbox.exec(list(argv), timeout=60.0).ok
        except SandboxGone:
            raise
        except (OSError, TimeoutError):
            return False


@dataclass(frozen=True)
class IsolationStep(TemplateStep):
    """Record under the sandbox's state root whether it is isolated from the user's machine
    (:data:`ISOLATION_FILE`): the CLI drivers skip their agent's own permission checks by
    default only where this says ``true`` (any sandbox but a ``LocalSandbox``). Make it with
    :meth:`make`."""

    @classmethod
    def make(cls) -> "IsolationStep":
        """The step (its ``check``/``install`` are only descriptions)."""
        return cls(name="the sandbox's isolation record", check=("true",), install=("true",), timeout=60.0)

    def run(self, sandbox: Sandbox) -> None:
        """Write the record when it is missing or different.

        Raises:
            SandboxGone: the sandbox is gone.
        """
        path = posixpath.join(sandbox.state_root, ISOLATION_FILE)
        data = (json.dumps({"isolated": _isolated(sandbox)}) + "\n").encode()
        try:
            if sandbox.read_file(path) == data:
                return
        except SandboxGone:
            raise
        except OSError:
            pass
        sandbox.write_file(path, data, mode=0o644)


def _isolated(sandbox: Sandbox) -> bool:
    """Whether the sandbox is isolated from the user's machine (anything but a LocalSandbox)."""
    from .local import LocalSandbox

    return not isinstance(sandbox, LocalSandbox)

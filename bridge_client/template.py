"""Templates: idempotent install steps that prepare a sandbox for a bridge.

See the *Sandbox adapters* guide (``sandbox-adapters``) and the *Docker sandbox* guide
(``docker``): how the bridge gets into a sandbox.

Each step has a check and an install command. The check runs first; the install runs only
when the check fails, and the check must pass after it. A session runs the template before
every launch, so a sandbox prepared by another version keeps what it has and gets only what
it lacks.
"""
from __future__ import annotations

import logging
import shlex
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Tuple

from .errors import SandboxGone, TemplateError
from .sandbox.base import ExecResult, Sandbox

__all__ = ["TemplateStep", "Template", "bridge_template", "agent_cli_steps"]

log = logging.getLogger("bridge_client")

_TAIL_BYTES = 2000


def _tail(result: ExecResult) -> str:
    text = (result.stdout + result.stderr)[-_TAIL_BYTES:]
    return text.decode("utf-8", "replace").strip()


@dataclass(frozen=True)
class TemplateStep:
    """One install step.

    Attributes:
        name: what the step provides, for messages ("the bridge program").
        check: a command that exits 0 when the sandbox already has it.
        install: a command that provides it.
        timeout: seconds each command may take.
    """

    name: str
    check: Tuple[str, ...]
    install: Tuple[str, ...]
    timeout: float = 600.0


@dataclass(frozen=True)
class Template:
    """Install steps, run in order by :meth:`run`.

    Attributes:
        steps: the steps (each checked before it runs).
    """

    steps: Tuple[TemplateStep, ...] = field(default_factory=tuple)

    def run(self, sandbox: Sandbox) -> None:
        """Run every step whose check fails, and check it again after installing.

        A step with a ``run(sandbox)`` method of its own (such as
        :class:`~bridge_client.sandbox.wheelhouse.WheelStep`, which copies files in before it
        installs) is run by that method instead.

        Raises:
            TemplateError: an install command failed, timed out, or its check still fails.
            SandboxGone: the sandbox cannot run commands.
        """
        for step in self.steps:
            own_run = getattr(step, "run", None)
            if callable(own_run):
                own_run(sandbox)
                continue
            if self._exec(sandbox, step, step.check).ok:
                continue
            log.debug("template: installing %s", step.name)
            installed = self._exec(sandbox, step, step.install)
            if not installed.ok:
                raise TemplateError(
                    f"installing {step.name} failed (exit {installed.exit_code}): {shlex.join(step.install)}",
                    step=step.name,
                    output=_tail(installed),
                )
            again = self._exec(sandbox, step, step.check)
            if not again.ok:
                raise TemplateError(
                    f"{step.name} is still missing after installing it: {shlex.join(step.check)} failed",
                    step=step.name,
                    output=_tail(again),
                )

    @staticmethod
    def _exec(sandbox: Sandbox, step: TemplateStep, argv: Sequence[str]) -> ExecResult:
        try:
            return sandbox.exec(argv, timeout=step.timeout)
        except SandboxGone:
            raise
        except TimeoutError as exc:
            raise TemplateError(
                f"{step.name}: {shlex.join(argv)} ran longer than {step.timeout} s", step=step.name
            ) from exc
        except OSError as exc:
            raise TemplateError(
                f"{step.name}: cannot run {argv[0]}: {exc.strerror or exc}", step=step.name
            ) from exc


def bridge_template(python: str = "python3", requirement: Optional[str] = None) -> Template:
    """The template that installs the bridge program of this package in a sandbox.

    Args:
        python: the Python interpreter in the sandbox that will run the bridge.
        requirement: what pip installs from the sandbox's package index when the bridge is
            missing (only when you name it: a requirement you trust); ``None`` (the default)
            installs this very package instead, from wheels built on the host (from its
            source tree, or rebuilt from its installed files) and copied in, which needs no
            network in the sandbox and never asks an index for this package by name.

    Returns:
        A one-step :class:`Template`. With ``requirement=None`` the step is a
        :class:`~bridge_client.sandbox.wheelhouse.WheelStep` (checks ``import
        bridge_client.bridge.server`` at this version; a sandbox without ``python`` gets a
        :class:`TemplateError`). Otherwise: check that import, install with ``python -m pip
        install requirement``.
    """
    if requirement is None:
        from .sandbox.wheelhouse import WheelStep  # imports this module: not at the top

        return Template((WheelStep.for_python(python),))
    return Template(
        (
            TemplateStep(
                name="the bridge program (bridge_client[bridge])",
                check=(python, "-c", "import bridge_client.bridge.server"),
                install=(python, "-m", "pip", "install", "--quiet", requirement),
            ),
        )
    )


def agent_cli_steps(driver: str, agent_options: Any = None) -> Tuple[TemplateStep, ...]:
    """The template steps a built-in driver needs besides the bridge program.

    ``claude-code``, ``codex``, ``gemini``, ``qwen`` and ``pi`` need their CLI: an
    :class:`~bridge_client.sandbox.npm.NpmCliStep` that installs the proven version from npm
    only when the sandbox lacks the program, into a private prefix under the state root for
    a ``LocalSandbox`` (never ``npm install -g`` on your machine), globally inside other
    sandboxes, saying on stderr what and where. A driver given an ``executable`` option gets
    no install: that program is used as it is. Before it, an
    :class:`~bridge_client.sandbox.npm.IsolationStep` records whether the sandbox is isolated
    (the drivers skip the agent's own permission checks by default only there). Other
    drivers need nothing.

    Args:
        driver: a driver name (``"claude-code"``) or ``MODULE:CALLABLE``.
        agent_options: the driver's options (a JSON object or ``None``).

    Returns:
        The steps (empty for drivers that need none).
    """
    from .sandbox.npm import AGENT_CLIS, IsolationStep, NpmCliStep  # imports this module

    if driver not in AGENT_CLIS:
        return ()
    if isinstance(agent_options, dict) and agent_options.get("executable"):
        return (IsolationStep.make(),)
    return (IsolationStep.make(), NpmCliStep.for_cli(*AGENT_CLIS[driver]))

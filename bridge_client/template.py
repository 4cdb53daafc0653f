"""Templates: idempotent install steps that prepare a sandbox for a bridge.

See the *Sandbox adapters* guide (``sandbox-adapters``) and the *Docker sandbox* guide
(``docker``): how the bridge gets into a sandbox.

Each step has a check and an install command. The check runs first; the install runs only
when the check fails, and the check must pass after it. A session runs the template before
a launch, so a sandbox prepared by another version keeps what it has and gets only what it
lacks. A step marked ``remember`` (the bridge program's step is) leaves a marker file in the
sandbox's state root once its check passed, keyed by everything the step says (so by the
package version for the bridge program): while that marker is there, the step is skipped
without starting its check. When a bridge launched on a marker's word cannot start, the
launcher runs the template again with ``recheck=True``, which ignores the markers.
"""
from __future__ import annotations

import logging
import shlex
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Tuple

from .errors import HarnessError, SandboxGone, TemplateError, UntrustedFile
from .sandbox.base import ExecResult, Sandbox
from .sandbox.template_step import MARKS_DIR, TemplateStep, output_tail

__all__ = ["TemplateStep", "Template", "bridge_template", "agent_cli_steps", "MARKS_DIR"]

log = logging.getLogger("bridge_client")


@dataclass(frozen=True)
class Template:
    """Install steps, run in order by :meth:`run`.

    Attributes:
        steps: the steps (each checked before it runs).
    """

    steps: Tuple[TemplateStep, ...] = field(default_factory=tuple)

    def run(
        self, sandbox: Sandbox, *, recheck: bool = False, defer: Sequence[TemplateStep] = ()
    ) -> bool:
        """Run every step whose check fails, and check it again after installing.

        A step with a ``run(sandbox)`` method of its own (such as
        :class:`~bridge_client.sandbox.wheelhouse.WheelStep`, which copies files in before it
        installs) is run by that method instead. A step with ``remember`` set is skipped when
        its marker is in the sandbox (a regular file of the sandbox user's, mode 0600, in a
        private folder, where the sandbox can tell; anything else counts as no marker), and
        leaves its marker once it passed.

        Args:
            sandbox: where to run the steps.
            recheck: ignore the markers: run every step's check (and install what fails).
            defer: steps to skip now when they have no marker, because what runs next proves
                them (the launcher: a bridge that says it listens at the step's version); the
                caller then calls :meth:`remember` with those proven.

        Returns:
            ``True`` when a step was skipped on its marker's word (the caller may run the
            template again with ``recheck=True`` if the bridge then cannot start).

        Raises:
            TemplateError: an install command failed, timed out, or its check still fails.
            SandboxGone: the sandbox cannot run commands.
        """
        trusted = False
        for step in self.steps:
            remember = getattr(step, "remember", False)
            if remember:
                if not recheck and _has_marker(sandbox, step):
                    trusted = True
                    continue
                if not recheck and any(step is d for d in defer):
                    trusted = True
                    continue
                if recheck:
                    _write_marker(sandbox, step, b"")  # stale until the step passes again
            self._run_step(sandbox, step)
            if remember:
                _write_marker(sandbox, step, step.marker())
        return trusted

    @staticmethod
    def remember(sandbox: Sandbox, steps: Sequence[TemplateStep]) -> None:
        """Leave the markers of ``steps`` (deferred by :meth:`run`, then proven) in ``sandbox``.

        Raises:
            SandboxGone: the sandbox is gone (a marker that cannot be written is only logged).
        """
        for step in steps:
            _write_marker(sandbox, step, step.marker())

    def _run_step(self, sandbox: Sandbox, step: TemplateStep) -> None:
        own_run = getattr(step, "run", None)
        if callable(own_run):
            own_run(sandbox)
            return
        if self._exec(sandbox, step, step.check).ok:
            return
        log.debug("template: installing %s", step.name)
        installed = self._exec(sandbox, step, step.install)
        if not installed.ok:
            raise TemplateError(
                f"installing {step.name} failed (exit {installed.exit_code}): {shlex.join(step.install)}",
                step=step.name,
                output=output_tail(installed),
            )
        again = self._exec(sandbox, step, step.check)
        if not again.ok:
            raise TemplateError(
                f"{step.name} is still missing after installing it: {shlex.join(step.check)} failed",
                step=step.name,
                output=output_tail(again),
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


def _has_marker(sandbox: Sandbox, step: TemplateStep) -> bool:
    """Whether the step's marker is in the sandbox with the expected content. Read as the
    launcher reads the state files: a sandbox that can tell who made a file
    (``read_private_file``) refuses one that is not the sandbox user's private file."""
    path = step.marker_path(sandbox)
    reader = getattr(sandbox, "read_private_file", None) or sandbox.read_file
    try:
        data: bytes = reader(path)
    except UntrustedFile as exc:
        log.warning("template: not trusting the marker of %s, checking instead: %s", step.name, exc)
        return False
    except SandboxGone:
        raise
    except (OSError, HarnessError):
        return False
    return data == step.marker()


def _write_marker(sandbox: Sandbox, step: TemplateStep, data: bytes) -> None:
    """Write (or, with ``b""``, void) the step's marker; a marker that cannot be written only
    costs the next launch a check."""
    try:
        sandbox.write_file(step.marker_path(sandbox), data, mode=0o600)
    except SandboxGone:
        raise
    except (OSError, HarnessError) as exc:
        log.debug("template: cannot write the marker of %s: %s", step.name, exc)


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
        from .sandbox.wheelhouse import WheelStep  # only when asked for: it loads zipfile, email

        return Template((WheelStep.for_python(python),))
    return Template(
        (
            TemplateStep(
                name="the bridge program (bridge_client[bridge])",
                check=(python, "-c", "import bridge_client.bridge.server"),
                install=(python, "-m", "pip", "install", "--quiet", requirement),
                remember=True,
            ),
        )
    )


def agent_cli_steps(driver: str, agent_options: Any = None) -> Tuple[TemplateStep, ...]:
    """The template steps a built-in driver needs besides the bridge program.

    ``aider`` and ``vibe`` need theirs from PyPI: a
    :class:`~bridge_client.sandbox.pip_cli.PipCliStep` that installs the proven version into
    a venv of its own under the state root, in any sandbox. The npm CLIs
    (``claude-code``, ``codex``, ``gemini``, ``qwen``, ``pi``, ``cline``, ...) need an
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
    from .sandbox.npm import AGENT_CLIS, IsolationStep, NpmCliStep  # only for the CLI drivers
    from .sandbox.pip_cli import PY_AGENT_CLIS, PipCliStep

    if driver in PY_AGENT_CLIS:
        if isinstance(agent_options, dict) and agent_options.get("executable"):
            return (IsolationStep.make(),)
        return (IsolationStep.make(), PipCliStep.for_cli(*PY_AGENT_CLIS[driver]))
    if driver not in AGENT_CLIS:
        return ()
    if isinstance(agent_options, dict) and agent_options.get("executable"):
        return (IsolationStep.make(),)
    return (IsolationStep.make(), NpmCliStep.for_cli(*AGENT_CLIS[driver]))

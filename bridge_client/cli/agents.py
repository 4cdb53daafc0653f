"""Which agent a command runs, checked before any bridge is launched: ``--agent`` and its
``--option`` values to the :class:`~bridge_client.BridgeOptions` and
:class:`~bridge_client.CreateSessionOptions` of the session, a ``MODULE:CALLABLE`` agent loaded
where the bridge will load it, and an agent CLI's npm install said on stderr before it runs.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import shlex
import sys
from typing import Any, Dict, Optional, Tuple

from ..drivers import BUILTIN_DRIVERS
from ..errors import TemplateError
from ..options import BridgeOptions, CreateSessionOptions, Workspace
from ..sandbox.base import Sandbox
from ..sandbox.local import LocalSandbox
from ..template import Template, TemplateStep
from .arguments import approvals_on, parse_env, parse_options
from .exits import Failure, UsageError
from .output import print_err
from .sandboxes import open_sandbox

__all__ = ["AnnouncedStep", "announced", "session_options_for"]


# Run by the bridge's Python in the sandbox folder (where the bridge runs and imports the
# driver, ``python -m`` putting that folder first on sys.path): load the factory, call it with
# the options, print its agent_id. Failures are reported on the marker line, not as a traceback.
_PROBE = r"""
import importlib, json, sys
MARK = "@@bridge-client-probe "
def answer(**kv):
    sys.stdout.write("\n" + MARK + json.dumps(kv) + "\n")
    sys.exit(0)
spec, options = sys.argv[1], json.loads(sys.argv[2])
module_name, _, attr = spec.partition(":")
try:
    obj = importlib.import_module(module_name)
    for name in attr.split("."):
        obj = getattr(obj, name)
except Exception as exc:
    answer(load="%s: %s" % (type(exc).__name__, exc))
if not callable(obj):
    answer(load="%s is not callable" % spec)
try:
    driver = obj(options)
except Exception as exc:
    answer(options="%s: %s" % (type(exc).__name__, exc))
agent_id = getattr(driver, "agent_id", None)
approvals = bool(getattr(driver, "supports_approvals", False))
close = getattr(driver, "close", None)
if callable(close):
    try:
        close()
    except Exception:
        pass
answer(agentId=agent_id if isinstance(agent_id, str) else None, approvals=approvals)
"""
_PROBE_MARK = "@@bridge-client-probe "
_PROBE_TIMEOUT = 60.0


def _probe(sandbox: Sandbox, python: str, agent: str, agent_options: Dict[str, Any]) -> Dict[str, Any]:
    """Run :data:`_PROBE` in the sandbox folder; return its answer (``agentId``, ``load`` or
    ``options``). Raises Failure when it cannot run or gives no answer."""
    argv = [python, "-c", _PROBE, agent, json.dumps(agent_options or None)]
    try:
        result = sandbox.exec(argv, timeout=_PROBE_TIMEOUT)
    except (OSError, TimeoutError) as exc:
        raise Failure(f"cannot load agent {agent!r} in {sandbox.workdir}: {exc}") from None
    text = result.stdout.decode("utf-8", "replace")
    for line in reversed(text.splitlines()):
        if line.startswith(_PROBE_MARK):
            answer = json.loads(line[len(_PROBE_MARK):])
            if isinstance(answer, dict):
                return answer
    tail = (result.stderr or result.stdout).decode("utf-8", "replace").strip().splitlines()
    raise Failure(
        f"cannot load agent {agent!r} in {sandbox.workdir}: {python} exited with {result.exit_code}"
        + (f": {tail[-1]}" if tail else "")
    )


def _agent_id(
    agent: str,
    agent_options: Dict[str, Any],
    sandbox: Sandbox,
    python: str,
    template: Template,
    approvals: bool = False,
) -> str:
    """Check the agent and its options before any bridge is launched, so that bad ones are
    reported as bad input; return the ``agent_id`` the bridge will answer with.

    A built-in agent is made here once. A ``MODULE:CALLABLE`` agent is loaded where the bridge
    loads it: by the bridge's Python in the sandbox folder (:data:`_PROBE`), so a module that
    is only there (in the folder, or only in a container) works; when that Python lacks this
    package, the template installs it first. With ``approvals`` (``--approve``), an agent that
    cannot ask is refused here too, before anything is launched or installed.
    """
    builtin = BUILTIN_DRIVERS.get(agent)
    module_name, sep, attr = (builtin or agent).partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"unknown agent {agent!r}: use {', '.join(BUILTIN_DRIVERS)} or MODULE:CALLABLE")
    if builtin is None:
        answer = _probe(sandbox, python, agent, agent_options)
        if "bridge_client" in str(answer.get("load", "")):  # its module imports this package
            template.run(sandbox)
            answer = _probe(sandbox, python, agent, agent_options)
        if "load" in answer:
            raise UsageError(f"cannot load agent {agent!r} in {sandbox.workdir}: {answer['load']}")
        if "options" in answer:
            raise UsageError(f"agent {agent!r}: {answer['options']}")
        agent_id = answer.get("agentId")
        can_ask = answer.get("approvals") is True
    else:
        try:
            factory = getattr(importlib.import_module(module_name), attr)
        except ImportError as exc:
            raise UsageError(f"cannot load agent {agent!r}: {exc}") from None
        try:
            driver = factory(agent_options or None)
        except Exception as exc:
            raise UsageError(f"agent {agent!r}: {exc}") from None
        agent_id = getattr(driver, "agent_id", None)
        can_ask = bool(getattr(driver, "supports_approvals", False))
        close = getattr(driver, "close", None)
        if callable(close):
            close()
    if not isinstance(agent_id, str) or not agent_id:
        raise UsageError(f"agent {agent!r} has no agent_id")
    if approvals and not can_ask:
        raise UsageError(
            f"--approve: agent {agent!r} cannot ask before it runs a tool; run it without --approve"
        )
    return agent_id


@dataclasses.dataclass(frozen=True)
class AnnouncedStep(TemplateStep):
    """A template step that says on stderr what it installs before it does (the npm install
    of an agent's CLI), and adds a hint when the installer itself is missing."""

    def run(self, sandbox: Sandbox) -> None:
        """Check; when missing, announce and install (:meth:`Template.run`'s rules)."""
        try:
            if sandbox.exec(list(self.check), timeout=self.timeout).ok:
                return
        except (OSError, TimeoutError):
            pass
        where = sandbox.workdir if isinstance(sandbox, LocalSandbox) else f"the sandbox {sandbox.id}"
        print_err(
            f"bridge-client: {self.name} is missing; installing it for {where}: {shlex.join(self.install)}"
        )
        plain = TemplateStep(self.name, self.check, self.install, self.timeout)
        try:
            Template((plain,)).run(sandbox)
        except TemplateError as exc:
            if f"cannot run {self.install[0]}" not in str(exc):
                raise
            raise TemplateError(
                f"{str(exc).splitlines()[0]} (install Node.js and npm there, or {self.name} itself)",
                step=exc.step,
                output=exc.output,
            ) from None


def announced(template: Template) -> Template:
    """``template`` with its agent CLI steps (npm) announced on stderr; other steps as they are."""
    steps = tuple(
        AnnouncedStep(s.name, s.check, s.install, s.timeout)
        if type(s) is TemplateStep and s.install[:1] == ("npm",)
        else s
        for s in template.steps
    )
    return Template(steps)


def session_options_for(
    args: argparse.Namespace, sandbox: Optional[Sandbox] = None
) -> Tuple[BridgeOptions, CreateSessionOptions]:
    """The options of the session a command opens: ``--sandbox`` (or ``sandbox``), ``--agent``,
    ``--option``, ``--env``, ``--approve`` and ``--approval-timeout``, with the agent checked first (see
    :func:`_agent_id`).

    Raises:
        UsageError: an unknown agent, bad options, a bad ``--env``, or ``--approval-timeout``
            without ``--approve``.
        Failure: a ``MODULE:CALLABLE`` agent that cannot be loaded in the sandbox.
    """
    if sandbox is None:
        sandbox = open_sandbox(args.sandbox)
    if getattr(args, "approval_timeout", None) is not None and not approvals_on(args):
        raise UsageError("--approval-timeout needs --approve ask|all|none")
    agent_options = parse_options(args.option or [])
    module_name, sep, attr = BUILTIN_DRIVERS.get(args.agent, args.agent).partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(
            f"unknown agent {args.agent!r}: use {', '.join(BUILTIN_DRIVERS)} or MODULE:CALLABLE"
        )
    python = sys.executable if isinstance(sandbox, LocalSandbox) else "python3"
    from ..agent import bridge_options  # the host side: loaded by the commands that run an agent

    try:  # bridge_options checks a built-in agent's options too (ValueError)
        options = bridge_options(args.agent, python=python, agent_options=agent_options or None)
    except ValueError as exc:
        raise UsageError(f"agent {args.agent!r}: {exc}") from None
    options = dataclasses.replace(options, template=announced(options.template))
    agent_id = _agent_id(
        args.agent, agent_options, sandbox, python, options.template, approvals=approvals_on(args)
    )
    options = dataclasses.replace(options, id=agent_id)
    try:
        env = parse_env(getattr(args, "env", None) or [])  # commands without --env (cancel)
        session_options = CreateSessionOptions(
            workspace=Workspace(sandbox), env=env, approvals=approvals_on(args),
            approval_timeout=getattr(args, "approval_timeout", None),
        )
    except (TypeError, ValueError) as exc:
        raise UsageError(f"--env: {exc}") from None
    return options, session_options

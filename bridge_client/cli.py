"""The ``bridge-client`` command. See the *Command line* guide (``cli``).

::

    bridge-client run PROMPT... [--sandbox DIR|docker:IMAGE|URL] [--agent NAME|MODULE:CALLABLE]
                      [--option KEY=VALUE]... [--json] [--approve ask|all|none] [--state FILE]
    bridge-client continue TURN_STATE_FILE [--steps K] [--rerun-here] [same options as run]
    bridge-client cancel TURN_STATE_FILE [--sandbox DIR] [--timeout SECONDS]
    bridge-client answer TURN_STATE_FILE REQUEST_ID allow|deny|always [--message TEXT]
    bridge-client say TURN_STATE_FILE TEXT...
    bridge-client bridges [--sandbox DIR | --all] [--json]
    bridge-client stop (BRIDGE_ID | --all) [--sandbox DIR] [--timeout SECONDS]
    bridge-client prune [--dry-run] [--min-age SECONDS]

A PROMPT word ``-`` reads the prompt from standard input, ``@FILE`` from a file.

``python -m bridge_client`` is the same command.

On a terminal, a spinner with the seconds of silence shows on stderr while the turn sends
nothing, and markers are coloured (not when ``NO_COLOR`` is set); piped output gets neither.
``-v`` logs what the client does (connects, launches, resends, resumes, restarts) on stderr.

Exit status: 0 for a turn that finished with ``stop`` (or a command that did its job), 1 for
a turn that finished otherwise or a failure, 2 for bad command-line input, 130 after Ctrl-C and
143 after SIGTERM (the turn is suspended, not cancelled, and the command says how to continue
it), 70 for an unexpected error inside bridge-client (a bug). Every error is one line on stderr
starting ``bridge-client: error:``; the command never prints a traceback.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import logging
import os
import posixpath
import re
import shlex
import signal
import sys
import threading
import time
from typing import Any, Dict, NoReturn, Optional, Sequence, TextIO, Tuple


def _interrupted_while_starting(signum: int, frame: Any) -> None:
    """Ctrl-C while the modules below load: exit 130 quietly, not with an import traceback."""
    raise SystemExit(130)


# Installed only by the process's main thread, and only over Python's own handler; put back
# once the imports are done.
_GUARD_IMPORTS = (
    threading.current_thread() is threading.main_thread()
    and signal.getsignal(signal.SIGINT) is signal.default_int_handler
)
if _GUARD_IMPORTS:
    signal.signal(signal.SIGINT, _interrupted_while_starting)
try:
    from . import __version__
    from .agent import bridge_options, create_session
    from .bridge import identity
    from .cli_bridges import LocalStateRoot, bridge_rows, local_state_roots, print_bridges
    from .cli_answer import add_answer_commands
    from .cli_cancel import add_cancel_command
    from .cli_interactive import add_approve_arguments, approvals_on, begin, describe
    from .cli_input import PROMPT_HELP, PromptError, read_prompt
    from .cli_prune import add_prune_command
    from .client.connection import Connection
    from .client.session import Session
    from .drivers import BUILTIN_DRIVERS
    from .errors import ApprovalsUnsupported, ConnectionLost, HarnessError, TemplateError, Unauthorized
    from .options import BridgeOptions, CreateSessionOptions, Workspace
    from .paths import SECRET_ENV, default_secret, user_home
    from .redacted import hmac_token
    from .sandbox.base import Sandbox
    from .sandbox.local import LocalSandbox
    from .sandbox.urls import is_sandbox_url, sandbox_from_url
    from .template import Template, TemplateStep
    from .terminal import Colours, Progress, colour_enabled, is_terminal
    from .wire.parts import (
        ApprovalRequest,
        Data,
        HelloResult,
        Part,
        ReasoningDelta,
        StepReset,
        TextDelta,
        ToolCall,
        ToolResult,
        TurnFinish,
        TurnState,
    )
finally:
    if _GUARD_IMPORTS:
        signal.signal(signal.SIGINT, signal.default_int_handler)

__all__ = ["main", "UsageError"]


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit status 2."""


class _Failure(Exception):
    """A command that could not do its job (not bad input): one line, exit status 1."""


class _OutputError(Exception):
    """Writing the command's own output failed (stdout closed or full): exit status 1."""

    def __init__(self, error: OSError) -> None:
        super().__init__(error.strerror or str(error))
        self.error = error


class _Stopped(KeyboardInterrupt):
    """SIGTERM while a turn streams: suspended like Ctrl-C, exit status 128 + 15."""

    signum = int(signal.SIGTERM)


# ----------------------------------------------------------------------------- parsing


def _parse_options(pairs: Sequence[str]) -> Dict[str, Any]:
    """``KEY=VALUE`` pairs to a dict; a VALUE that is JSON is taken as JSON, else as text."""
    out: Dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"--option takes KEY=VALUE, got {pair!r}")
        try:
            out[key] = json.loads(raw)
        except ValueError:
            out[key] = raw
    return out


def _parse_env(items: Sequence[str]) -> Dict[str, str]:
    """``--env NAME`` (the value from this environment) and ``--env NAME=VALUE`` to a dict.
    Messages name the variable, never its value."""
    out: Dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not name:
            raise UsageError(f"--env takes NAME or NAME=VALUE, got {item.split('=', 1)[0]!r}=...")
        if not sep:
            if name not in os.environ:
                raise UsageError(
                    f"--env {name}: {name} is not set in this environment (or use --env {name}=VALUE)"
                )
            value = os.environ[name]
        out[name] = value
    return out


_DOCKER_PREFIX = "docker:"
_SANDBOX_HELP = (
    "the workspace folder (default: the current folder), docker:IMAGE for a container of "
    "IMAGE (made once, then reused; see the Docker sandbox guide), ssh://USER@HOST[:PORT]/PATH "
    "for a folder on another machine, or docker+tcp://HOST:PORT/NAME, docker+ssh://USER@HOST/NAME "
    "for a container on another machine's engine (see the Scaling guide)"
)


def _sandbox(folder: Optional[str]) -> Sandbox:
    """``DIR`` -> a LocalSandbox; ``docker:IMAGE`` -> the running container made earlier for
    IMAGE, or a new one (see :doc:`docker`); an ``ssh://``, ``docker+tcp://`` or
    ``docker+ssh://`` URL -> a sandbox on another machine (see :doc:`scaling`)."""
    if is_sandbox_url(folder):
        try:
            return sandbox_from_url(str(folder))
        except (ValueError, FileNotFoundError, NotADirectoryError) as exc:
            raise UsageError(f"--sandbox {folder}: {exc}") from None
    if folder and folder.startswith(_DOCKER_PREFIX):
        image = folder[len(_DOCKER_PREFIX):]
        if not image:
            raise UsageError("--sandbox docker:IMAGE needs an image name")
        from .sandbox.docker import DockerSandbox  # the docker extra: imported only when used

        return DockerSandbox.for_image(image)
    try:
        return LocalSandbox(folder or ".")
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise UsageError(str(exc)) from None


def _sandbox_label(folder: Optional[str]) -> str:
    """How a sandbox is named in a saved turn state and a printed command: ``docker:IMAGE`` as
    given, a folder as its absolute real path."""
    if (folder and folder.startswith(_DOCKER_PREFIX)) or is_sandbox_url(folder):
        return str(folder)
    return os.path.realpath(folder or ".")


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
    ``options``). Raises _Failure when it cannot run or gives no answer."""
    argv = [python, "-c", _PROBE, agent, json.dumps(agent_options or None)]
    try:
        result = sandbox.exec(argv, timeout=_PROBE_TIMEOUT)
    except (OSError, TimeoutError) as exc:
        raise _Failure(f"cannot load agent {agent!r} in {sandbox.workdir}: {exc}") from None
    text = result.stdout.decode("utf-8", "replace")
    for line in reversed(text.splitlines()):
        if line.startswith(_PROBE_MARK):
            answer = json.loads(line[len(_PROBE_MARK):])
            if isinstance(answer, dict):
                return answer
    tail = (result.stderr or result.stdout).decode("utf-8", "replace").strip().splitlines()
    raise _Failure(
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
class _AnnouncedStep(TemplateStep):
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
        _say(f"bridge-client: {self.name} is missing; installing it for {where}: {shlex.join(self.install)}")
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


def _announced(template: Template) -> Template:
    """``template`` with its agent CLI steps (npm) announced on stderr; other steps as they are."""
    steps = tuple(
        _AnnouncedStep(s.name, s.check, s.install, s.timeout)
        if type(s) is TemplateStep and s.install[:1] == ("npm",)
        else s
        for s in template.steps
    )
    return Template(steps)


def _session_options(
    args: argparse.Namespace, sandbox: Optional[Sandbox] = None
) -> Tuple[BridgeOptions, CreateSessionOptions]:
    if sandbox is None:
        sandbox = _sandbox(args.sandbox)
    agent_options = _parse_options(args.option or [])
    module_name, sep, attr = BUILTIN_DRIVERS.get(args.agent, args.agent).partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(
            f"unknown agent {args.agent!r}: use {', '.join(BUILTIN_DRIVERS)} or MODULE:CALLABLE"
        )
    python = sys.executable if isinstance(sandbox, LocalSandbox) else "python3"
    try:  # bridge_options checks a built-in agent's options too (ValueError)
        options = bridge_options(args.agent, python=python, agent_options=agent_options or None)
    except ValueError as exc:
        raise UsageError(f"agent {args.agent!r}: {exc}") from None
    options = dataclasses.replace(options, template=_announced(options.template))
    agent_id = _agent_id(
        args.agent, agent_options, sandbox, python, options.template, approvals=approvals_on(args)
    )
    options = dataclasses.replace(options, id=agent_id)
    try:
        env = _parse_env(getattr(args, "env", None) or [])  # commands without --env (cancel)
        session_options = CreateSessionOptions(
            workspace=Workspace(sandbox), env=env, approvals=approvals_on(args)
        )
    except (TypeError, ValueError) as exc:
        raise UsageError(f"--env: {exc}") from None
    return options, session_options


# ----------------------------------------------------------------------------- output


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


class _Printer:
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
        if isinstance(part, (TextDelta, ReasoningDelta)):
            if part.text:
                self._text(part.text, isinstance(part, ReasoningDelta))
        elif isinstance(part, ToolCall):
            shown = part.input.get("command") if isinstance(part.input, dict) else None
            marker = self.c.tool(f"[{part.tool_name}]")
            self._line(f"{marker} {shown if isinstance(shown, str) else json.dumps(part.input)}")
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


_SANDBOX_KEY = "sandbox"  # what the saved turn state adds to TurnState's fields


def _save_turn_state(state: TurnState, sandbox_label: str) -> str:
    """Write the turn state, plus the sandbox it runs in, to ``<user_home>/turns/<turn id>.json``
    (mode 0600); return the path. The extra key is ignored by :meth:`TurnState.from_json`."""
    folder = os.path.join(user_home(), "turns")
    path = os.path.join(folder, f"{state.turn_id}.json")
    record = dict(state.to_dict(), **{_SANDBOX_KEY: sandbox_label})
    identity.secure_write(path, json.dumps(record, ensure_ascii=False).encode())
    return path


def _continue_command(path: str, args: argparse.Namespace, steps: int) -> str:
    """The command that continues the turn: always with the sandbox (an absolute path or
    ``docker:IMAGE``), so it works from any folder."""
    words = ["bridge-client", "continue", path]
    if steps:
        words += ["--steps", str(steps)]
    words += ["--sandbox", _sandbox_label(args.sandbox)]
    words += ["--agent", args.agent]
    for pair in args.option or []:
        words += ["--option", pair]
    if getattr(args, "approve", None):
        words += ["--approve", args.approve]
    for item in getattr(args, "env", None) or []:
        # Only the name: a value may be a secret, and it is to be taken from the environment
        # of the shell that continues (export it there, or add =VALUE).
        words += ["--env", item.partition("=")[0]]
    return " ".join(shlex.quote(w) for w in words)


def _interrupt_once(signum: int, frame: Any) -> None:
    # A second Ctrl-C (or SIGTERM) while the turn is being suspended would interrupt that too
    # (and can leave a lock half-taken inside threading.Condition): ignore any more.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if signum == signal.SIGTERM:
        raise _Stopped
    raise KeyboardInterrupt


def _progress(args: argparse.Namespace) -> Progress:
    """The spinner on stderr, when it is a terminal and ``-v`` does not log there."""
    return Progress(None if args.verbose else sys.stderr)


def _waiting_for(part: Part) -> str:
    """What the spinner says the turn is waiting for after ``part``."""
    if isinstance(part, ToolCall):
        return f"{part.tool_name} running"
    if isinstance(part, ApprovalRequest):
        return "waiting for an answer"
    return "waiting for the agent"


def _stream(session: Session, turn: Any, args: argparse.Namespace, progress: Progress) -> int:
    as_json = args.json
    out = sys.stdout
    printer = _Printer(out)
    shared_terminal = is_terminal(out)
    handlers: Dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            handlers[signum] = signal.signal(signum, _interrupt_once)
    try:
        approver = begin(args, turn, sys.modules[__name__])
        try:
            for part in turn:
                with progress.output(_waiting_for(part)):
                    try:
                        if as_json:
                            out.write(part.to_json() + "\n")
                            out.flush()
                        else:
                            printer.show(part)
                    except OSError as exc:
                        raise _OutputError(exc) from None
                    if approver is not None:
                        approver.on_part(part)
                    # The spinner draws on its own line only: not after half a line of text.
                    progress.may_draw = printer.at_line_start or not shared_terminal
        except KeyboardInterrupt as exc:
            progress.close()
            state = turn.suspend()
            path = _save_turn_state(state, _sandbox_label(args.sandbox))
            command = _continue_command(path, args, turn.steps)
            _say(f"\nsuspended; the turn goes on in the bridge. Continue it with:\n  {command}")
            return 128 + (exc.signum if isinstance(exc, _Stopped) else int(signal.SIGINT))
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    finish = turn.finish
    if finish is None:
        _say("bridge-client: error: the turn ended without turn-finish")
        return 1
    if finish.finish_reason != "stop":
        if as_json:  # the human output's last line says it already
            detail = f": {finish.error}" if finish.error else ""
            _say(f"bridge-client: turn finished with {finish.finish_reason}{detail}")
        return 1
    return 0


# ----------------------------------------------------------------------------- commands


def _check_utf8(prompt: str) -> None:
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


def _cmd_run(args: argparse.Namespace) -> int:
    try:
        prompt = read_prompt(args.prompt)
    except PromptError as exc:
        raise UsageError(str(exc)) from None
    _check_utf8(prompt)
    if not prompt.strip():
        raise UsageError("the prompt is empty")
    options, session_options = _session_options(args)
    progress = _progress(args)
    try:
        with create_session(options, session_options) as session:
            return _stream(session, session.turn(prompt), args, progress)
    finally:
        progress.close()


def _read_turn_state(path: str) -> Tuple[TurnState, Optional[str]]:
    """Read a saved turn state; return it and the sandbox it was saved with (``None`` for a
    file without one, such as a plain ``TurnState.to_json()``)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        record = json.loads(raw)
        state = TurnState.from_dict(record)
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"{path} is not a turn state: {exc}") from None
    recorded = record.get(_SANDBOX_KEY) if isinstance(record, dict) else None
    return state, recorded if isinstance(recorded, str) and recorded else None


def _has_bridge(sandbox: Sandbox, state: TurnState) -> bool:
    """Whether the turn's bridge has its state directory (its ``launch.json`` naming it and the
    turn's agent) in ``sandbox``: when it has not, ``continue_turn`` runs the turn again from
    its prompt."""
    if not _BRIDGE_ID.match(state.bridge_id):
        return False
    path = posixpath.join(identity.state_dir(sandbox.state_root, state.bridge_id), identity.LAUNCH_FILE)
    try:
        info = identity.parse_launch(sandbox.read_file(path))
    except (OSError, ValueError):
        return False
    return info.bridge_id == state.bridge_id and info.agent_id == state.agent_id


def _cmd_continue(args: argparse.Namespace) -> int:
    state, recorded = _read_turn_state(args.turn_state_file)
    if args.steps < 0:
        raise UsageError("--steps must be >= 0")
    if args.agent is None:
        args.agent = state.agent_id
    if args.sandbox is None and recorded is not None:
        args.sandbox = recorded  # the sandbox the turn runs in, not the current folder
    sandbox = _sandbox(args.sandbox)
    here = _sandbox_label(args.sandbox)
    if not _has_bridge(sandbox, state):
        where = f"it ran in {recorded}" if recorded is not None else "the file does not say where it ran"
        if recorded != here and not args.rerun_here:
            raise UsageError(
                f"the turn's bridge {state.bridge_id} is not in {here} ({where}): continuing would run "
                "the whole turn again from its prompt here, commands and all; use the turn's --sandbox, "
                "or pass --rerun-here to run it again here"
            )
        _say(f"bridge-client: the turn's bridge is gone from {here}: the turn runs again from its prompt")
    options, session_options = _session_options(args, sandbox)
    progress = _progress(args)
    try:
        with create_session(options, session_options) as session:
            return _stream(session, session.continue_turn(state, steps=args.steps), args, progress)
    finally:
        progress.close()


def _cmd_bridges(args: argparse.Namespace) -> int:
    if args.all:
        if args.sandbox is not None:
            raise UsageError("give --sandbox or --all, not both")
        roots = [LocalStateRoot(root) for root in local_state_roots()]
        return print_bridges(roots, args.json, f"no bridges under {user_home()}", _print)
    sandbox = _sandbox(args.sandbox)
    return print_bridges([sandbox], args.json, f"no bridges in {sandbox.workdir}", _print)


_BRIDGE_ID = re.compile(r"[0-9a-f]{%d}\Z" % identity.BRIDGE_ID_LENGTH)


class _NotRunning(Exception):
    """The bridge to stop is not running (nothing to do: exit status 0)."""


def _check_it_is_that_bridge(sandbox: Sandbox, info: identity.ListeningInfo, bridge_id: str) -> None:
    """Before a signal goes to a pid: the bridge must answer ``Hello`` with that bridge id and
    that pid (a stale listening file may name a pid the system gave to another process)."""
    token = hmac_token(default_secret())(sandbox.id)
    try:
        conn = Connection(sandbox.expose(info.port), token, open_timeout=5.0)
    except Unauthorized:
        raise _Failure(
            f"bridge {bridge_id} refuses this user's token: it was launched with another secret; "
            f"set {SECRET_ENV} to the secret it was launched with (or run this as the user who did)"
        ) from None
    except ConnectionLost:
        raise _NotRunning(f"bridge {bridge_id} is not running (its listening file is stale)") from None
    try:
        hello = HelloResult.from_dict(conn.call("Hello", None, timeout=5.0))
    except HarnessError as exc:
        raise _Failure(f"port {info.port} does not answer as bridge {bridge_id}: {exc}") from None
    finally:
        conn.close()
    if hello.bridge_id != bridge_id or hello.pid != info.pid:
        raise _NotRunning(f"bridge {bridge_id} is not running (port {info.port} is another program's)")


def _stop_one(sandbox: Sandbox, bridge_id: str, timeout: float) -> str:
    """Stop one bridge (SIGTERM, then wait for its listening file to go); return what to print.

    Raises:
        _NotRunning: it is not running (already stopped, or a stale listening file).
        _Failure: no such bridge, another secret, or it did not stop within ``timeout``.
    """
    folder = identity.state_dir(sandbox.state_root, bridge_id)
    listening = posixpath.join(folder, identity.LISTENING_FILE)
    try:
        info = identity.parse_listening(sandbox.read_file(listening))
    except FileNotFoundError:
        try:
            sandbox.read_file(posixpath.join(folder, identity.LAUNCH_FILE))
        except FileNotFoundError:
            raise _Failure(
                f"no bridge {bridge_id} in {sandbox.workdir} (see `bridge-client bridges`)"
            ) from None
        except OSError:
            pass
        raise _NotRunning(f"bridge {bridge_id} is not running") from None
    except ValueError as exc:
        raise _Failure(f"bridge {bridge_id}: {exc}") from None
    _check_it_is_that_bridge(sandbox, info, bridge_id)
    result = sandbox.exec(["kill", "-TERM", str(info.pid)])
    if not result.ok:
        raise _NotRunning(f"bridge {bridge_id} (pid {info.pid}) is not running")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            sandbox.read_file(listening)
        except FileNotFoundError:
            return f"stopped bridge {bridge_id} (pid {info.pid})"
        time.sleep(0.05)
    raise _Failure(f"bridge {bridge_id} (pid {info.pid}) did not stop within {timeout:g} s")


def _cmd_stop(args: argparse.Namespace) -> int:
    if args.all == (args.bridge_id is not None):
        raise UsageError("give one BRIDGE_ID or --all")
    if args.timeout < 0:
        raise UsageError("--timeout must be >= 0")
    if args.bridge_id is not None and not _BRIDGE_ID.match(args.bridge_id):
        raise UsageError(
            f"{args.bridge_id!r} is not a bridge id (32 hex characters, from `bridge-client bridges`)"
        )
    sandbox = _sandbox(args.sandbox)
    if args.bridge_id is not None:
        try:
            _print(_stop_one(sandbox, args.bridge_id, args.timeout))
        except _NotRunning as exc:
            _print(str(exc))
        return 0
    failed = 0
    rows = [row for row in bridge_rows(sandbox) if row["pid"] is not None]
    for row in rows:
        try:
            _print(_stop_one(sandbox, row["id"], args.timeout))
        except _NotRunning:
            pass
        except (_Failure, HarnessError) as exc:
            _say(f"bridge-client: error: {exc}")
            failed += 1
    if not rows:
        _print(f"no running bridges in {sandbox.workdir}")
    return 1 if failed else 0


# ----------------------------------------------------------------------------- main


def _say(line: str) -> None:
    """Print one line on stderr, if there is one."""
    if sys.stderr is not None:
        try:
            print(line, file=sys.stderr)
        except OSError:
            pass


def _print(line: str) -> None:
    """Print one line of the command's output on stdout. Raises _OutputError."""
    try:
        print(line, flush=True)
    except OSError as exc:
        raise _OutputError(exc) from None


def _log_to_stderr() -> None:
    """``-v``: the ``bridge_client`` logger's DEBUG lines on stderr; other libraries' loggers
    stay as they are (the root logger is not configured)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s bridge-client: %(message)s"))
    logger = logging.getLogger("bridge_client")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


_AGENT_HELP = """agents and their --option keys:
  shell   each prompt line is a command, run by /bin/sh in the workspace, each in its own
          shell (so `cd` and `export` do not carry over to the next line); one step each.
          timeout=SECONDS (per command, default 600), keep_going=true (go on after a failing
          command), shell=PATH
  echo    answers with the prompt, deterministically (for demos and tests).
          steps=N, chunks=N (text parts per step), delay=SECONDS (before each part),
          fail_at=N (the step that fails, for tests)
  openai  a coding agent over any OpenAI-compatible Chat Completions endpoint, with tools that
          run commands and read, write and list files in the workspace.
          model=NAME (required), base_url=URL (default https://api.openai.com/v1),
          api_key_env=VAR (the variable that holds the key, default OPENAI_API_KEY; never the
          key itself), max_steps=N (20), temperature=T, system=TEXT,
          max_retries=N (5: tries after the first, for unreachable servers, 429 and 5xx),
          backoff_initial=SECONDS (1), backoff_max=SECONDS (30),
          request_timeout=SECONDS (300), command_timeout=SECONDS (300),
          max_output=CHARS (20000), include_usage=false (for servers that refuse it)
  claude-code  the Claude Code CLI (claude -p, stream-json), resuming its own session.
          executable=PATH, model=NAME, permission_mode=MODE (default: the CLI's own checks
          in a local folder, bypassPermissions in a container), max_turns=N,
          append_system_prompt=TEXT, allowed_tools=[...], extra_args=[...],
          include_partial_messages=BOOL (true), continue_prompt=TEXT, interrupt_grace=SECONDS (5)
  codex   the Codex CLI (codex exec --json), resuming its own thread.
          executable=PATH, model=NAME, sandbox=MODE (default workspace-write in a local
          folder, danger-full-access in a container), skip_git_repo_check=BOOL (true),
          extra_args=[...], continue_prompt=TEXT, interrupt_grace=SECONDS (5)
  gemini  the Gemini CLI (gemini --output-format stream-json), resuming its own session.
          executable=PATH, model=NAME, approval_mode=MODE (default: the CLI's own checks in
          a local folder, yolo in a container), extra_args=[...], continue_prompt=TEXT,
          interrupt_grace=SECONDS (5)
  qwen    the Qwen Code CLI (stream-json like claude-code), resuming its own session.
          executable=PATH, model=NAME, approval_mode=MODE (as gemini), append_system_prompt=TEXT,
          include_partial_messages=BOOL (true), extra_args=[...], continue_prompt=TEXT,
          interrupt_grace=SECONDS (5)
  pi      the pi coding agent (pi -p --mode json), resuming its own session; it has no
          permission checks of its own: restrict it with tools=[...].
          executable=PATH, provider=NAME, model=NAME, thinking=LEVEL, tools=[...],
          append_system_prompt=TEXT, extra_args=[...], continue_prompt=TEXT,
          interrupt_grace=SECONDS (5)
  acp     any agent that speaks the Agent Client Protocol on its stdio (one process per
          session, its ACP session id kept in the session state).
          command=PROGRAM (required), args=[...], permission=reject|allow|allow_always
          (how the agent's permission requests are answered; default reject),
          fs=false (do not serve the client file methods), continue_prompt=TEXT,
          interrupt_grace=SECONDS (5), start_timeout=SECONDS (60), auth_method=ID,
          mcp_servers=[...], max_agents=N (8)
  MODULE:CALLABLE  your own driver factory, called with the options as a dict; loaded by
          the bridge's Python in the sandbox folder, like the bridge does
  claude-code, codex, gemini, qwen and pi install their CLI from npm when the sandbox lacks it
  and no executable is given: for a local folder into a private prefix under its state
  root, never npm install -g (said on stderr first). The Drivers guides of the docs have a
  page per agent.
"""


def _add_agent_arguments(p: argparse.ArgumentParser, default_agent: Optional[str]) -> None:
    p.add_argument(
        "--sandbox",
        metavar="DIR",
        help=_SANDBOX_HELP if default_agent else _SANDBOX_HELP.replace(
            "(default: the current folder)", "(default: the one the turn state names)"
        ),
    )
    p.add_argument(
        "--agent",
        default=default_agent,
        help="shell, echo, openai, claude-code, codex, gemini, qwen, pi, acp, or MODULE:CALLABLE (default: "
        + (default_agent or "the agent named in the turn state")
        + ")",
    )
    p.add_argument(
        "--option",
        action="append",
        metavar="KEY=VALUE",
        help="an agent option, repeatable; VALUE is read as JSON when it parses, else as text",
    )
    p.add_argument(
        "--env",
        action="append",
        metavar="NAME[=VALUE]",
        help="an environment variable for the agent and its commands, repeatable: NAME takes its "
        "value from this environment, NAME=VALUE gives it; sent to the bridge on each connection, "
        "never stored or logged there, and a running bridge is reused",
    )
    p.add_argument("--json", action="store_true", help="print one JSON part per line")
    _add_verbose(p)


def _add_verbose(p: argparse.ArgumentParser) -> None:
    """``-v`` after the command too (``bridge-client run -v ...``); SUPPRESS keeps the value
    given before the command."""
    p.add_argument(
        "-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
        help="log what the client does on stderr (DEBUG)",
    )


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of ``bridge-client``."""
    parser = _Parser(prog="bridge-client", description="Drive an AI agent that lives in a sandbox.")
    parser.add_argument("--version", action="version", version=f"bridge-client {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log what the client does on stderr (DEBUG)"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    run = commands.add_parser(
        "run",
        help="run one turn and stream it",
        description="Run one turn and stream its parts. Ctrl-C suspends it (it goes on in the bridge).",
        epilog=_AGENT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("prompt", nargs="+", metavar="PROMPT", help=PROMPT_HELP)
    _add_agent_arguments(run, "shell")
    add_approve_arguments(run, state=True)
    run.set_defaults(func=_cmd_run)

    cont = commands.add_parser(
        "continue",
        help="continue a suspended turn",
        description="Read a turn again from its saved state, in the bridge that runs it (use the "
        "same --agent and --option values as the run; the sandbox defaults to the one the state "
        "file names). When that bridge is not in the sandbox, the turn would run again from its "
        "prompt: refused unless --rerun-here, or the sandbox is the turn's own.",
        epilog=_AGENT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cont.add_argument("turn_state_file", metavar="TURN_STATE_FILE")
    cont.add_argument("--steps", type=int, default=0, help="complete steps you already have (skipped)")
    cont.add_argument(
        "--rerun-here",
        action="store_true",
        help="allow running the turn again from its prompt in this sandbox when its bridge is not here",
    )
    _add_agent_arguments(cont, None)
    add_approve_arguments(cont, state=False)
    cont.set_defaults(func=_cmd_continue)

    bridges = commands.add_parser(
        "bridges",
        help="list the bridges of a sandbox, or of every local sandbox (--all)",
        description="List bridges: id, agent, agent options, pid, port, whether it answers, and "
        "its sessions and turns. --all lists every local sandbox under the state directory.",
    )
    bridges.add_argument(
        "--sandbox", metavar="DIR", help=_SANDBOX_HELP
    )
    bridges.add_argument(
        "--all", action="store_true", help="every local sandbox under the state directory (not containers)"
    )
    bridges.add_argument("--json", action="store_true", help="print one JSON object per bridge")
    _add_verbose(bridges)
    bridges.set_defaults(func=_cmd_bridges)

    stop = commands.add_parser(
        "stop",
        help="stop a bridge cleanly",
        description="Stop a bridge (SIGTERM, after checking it answers as that bridge). A bridge that "
        "is not running is not an error.",
    )
    stop.add_argument("bridge_id", nargs="?", metavar="BRIDGE_ID", help="an id from `bridge-client bridges`")
    stop.add_argument("--all", action="store_true", help="stop every running bridge of the sandbox")
    stop.add_argument("--sandbox", metavar="DIR", help=_SANDBOX_HELP)
    stop.add_argument(
        "--timeout", type=float, default=10.0, help="seconds to wait for each to exit (default: %(default)g)"
    )
    _add_verbose(stop)
    stop.set_defaults(func=_cmd_stop)

    this = sys.modules[__name__]  # the running copy (``__main__`` under ``python -m``)
    add_cancel_command(commands, this)
    add_answer_commands(commands, this)
    add_prune_command(commands, this)
    return parser


def _os_error_text(exc: OSError) -> str:
    """An OSError as one line naming what it was about: the state directory when the file is
    in it (``BRIDGE_CLIENT_HOME``), else the file, else the error alone."""
    reason = exc.strerror or str(exc)
    filename = exc.filename if isinstance(exc.filename, str) else None
    if filename is None:
        return reason
    home = user_home()
    inside = filename.startswith(home.rstrip(os.sep) + os.sep) or home.startswith(filename + os.sep)
    if filename == home or inside:
        return (
            f"cannot use the state directory {home} (set by BRIDGE_CLIENT_HOME, else XDG_STATE_HOME): "
            f"{reason}: {filename}"
        )
    return f"{filename}: {reason}"


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run ``bridge-client`` with ``argv`` (default: ``sys.argv[1:]``); return the exit status.

    Errors are one line on stderr starting ``bridge-client: error:`` (plus a log tail when a
    bridge failed to start), never a traceback: 2 for bad input, 1 for failures, 70 for an
    unexpected error (a bug; ``-v`` logs its traceback).
    """
    if sys.stdout is None:  # started with stdout closed: write nowhere rather than crash
        sys.stdout = open(os.devnull, "w")
    try:
        args = build_parser().parse_args(argv)
        if args.verbose:
            _log_to_stderr()
        return int(args.func(args))
    except UsageError as exc:
        _say(f"bridge-client: error: {exc}")
        return 2
    except ApprovalsUnsupported as exc:  # the bridge's own check (the command's came first)
        lines = str(exc).splitlines()
        reason = (lines[0] if lines else "the agent cannot ask").split(": open the session")[0]
        _say(f"bridge-client: error: --approve: {reason}; run it without --approve")
        return 2
    except _Failure as exc:
        _say(f"bridge-client: error: {exc}")
        return 1
    except HarnessError as exc:
        lines = str(exc).splitlines()
        _say(f"bridge-client: error: {lines[0] if lines else type(exc).__name__}")
        tail = getattr(exc, "log_tail", "") or getattr(exc, "output", "")
        if tail:
            _say(tail)
        return 1
    except KeyboardInterrupt:
        _say("bridge-client: interrupted")
        return 130
    except _OutputError as exc:
        if not isinstance(exc.error, BrokenPipeError):
            _say(f"bridge-client: error: cannot write the output: {exc}")
        return 1
    except BrokenPipeError:
        return 1
    except OSError as exc:
        _say(f"bridge-client: error: {_os_error_text(exc)}")
        return 1
    except Exception as exc:  # noqa: BLE001  the last resort: a message, never a traceback
        logging.getLogger("bridge_client").debug("unexpected error", exc_info=True)
        _say(
            f"bridge-client: error: unexpected {type(exc).__name__}: {exc or '(no message)'}; "
            "this is a bug in bridge-client: -v logs the details"
        )
        return INTERNAL_ERROR


INTERNAL_ERROR = 70
"""Exit status for an unexpected error inside bridge-client (``EX_SOFTWARE``)."""


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""The ``bridge-client`` command (API.md, "Command line").

::

    bridge-client run PROMPT... [--sandbox DIR|docker:IMAGE] [--agent NAME|MODULE:CALLABLE]
                      [--option KEY=VALUE]... [--json]
    bridge-client continue TURN_STATE_FILE [--steps K] [same options as run]
    bridge-client bridges [--sandbox DIR]
    bridge-client stop BRIDGE_ID [--sandbox DIR]

On a terminal, a spinner with the seconds of silence shows on stderr while the turn sends
nothing, and markers are coloured (not when ``NO_COLOR`` is set); piped output gets neither.
``-v`` logs what the client does (connects, launches, resends, resumes, restarts) on stderr.

Exit status: 0 for a turn that finished with ``stop`` (or a command that did its job), 1 for
a turn that finished otherwise or a failure, 2 for bad command-line input, 130 after Ctrl-C
(the turn is suspended, not cancelled, and the command says how to continue it).
"""
from __future__ import annotations

import argparse
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
from typing import Any, Dict, List, Optional, Sequence, TextIO, Tuple

from . import __version__
from .agent import bridge_options, create_session
from .bridge import identity
from .client.session import Session
from .drivers import BUILTIN_DRIVERS
from .client.connection import Connection
from .errors import ConnectionLost, HarnessError, Unauthorized
from .paths import default_secret
from .redacted import hmac_token
from .options import BridgeOptions, CreateSessionOptions, Workspace
from .paths import user_home
from .sandbox.base import Sandbox
from .sandbox.local import LocalSandbox
from .terminal import Colours, Progress, colour_enabled, is_terminal
from .wire.parts import (
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

__all__ = ["main", "UsageError"]


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit status 2."""


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


_DOCKER_PREFIX = "docker:"
_SANDBOX_HELP = (
    "the workspace folder (default: the current folder), or docker:IMAGE for a container of "
    "IMAGE (made once, then reused; docs/docker.md)"
)


def _sandbox(folder: Optional[str]) -> Sandbox:
    """``DIR`` -> a LocalSandbox; ``docker:IMAGE`` -> the running container made earlier for
    IMAGE, or a new one (docs/docker.md)."""
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


def _agent_id(agent: str, agent_options: Dict[str, Any]) -> str:
    """Make the driver here once, so that bad options are reported as bad input before any
    bridge is launched; return its ``agent_id``."""
    module_name, sep, attr = BUILTIN_DRIVERS.get(agent, agent).partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"unknown agent {agent!r}: use {', '.join(BUILTIN_DRIVERS)} or MODULE:CALLABLE")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"cannot load agent {agent!r}: {exc}") from None
    if not callable(factory):
        raise UsageError(f"agent {agent!r} is not callable")
    try:
        driver = factory(agent_options or None)
    except Exception as exc:
        raise UsageError(f"agent {agent!r}: {exc}") from None
    agent_id = getattr(driver, "agent_id", None)
    close = getattr(driver, "close", None)
    if callable(close):
        close()
    if not isinstance(agent_id, str) or not agent_id:
        raise UsageError(f"agent {agent!r} has no agent_id")
    return agent_id


def _session_options(args: argparse.Namespace) -> Tuple[BridgeOptions, CreateSessionOptions]:
    sandbox = _sandbox(args.sandbox)
    agent_options = _parse_options(args.option or [])
    options = bridge_options(
        args.agent,
        python="python3" if (args.sandbox or "").startswith(_DOCKER_PREFIX) else None,
        agent_options=agent_options or None,
        agent_id=_agent_id(args.agent, agent_options),
    )
    return options, CreateSessionOptions(workspace=Workspace(sandbox))


# ----------------------------------------------------------------------------- output


class _Printer:
    """Shows parts as people read them: text as it arrives, tools marked, a final line;
    markers coloured when ``out`` is a terminal and ``NO_COLOR`` is not set."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.at_line_start = True
        self.c = Colours(colour_enabled(out))

    def _line(self, text: str) -> None:
        if not self.at_line_start:
            self.out.write("\n")
        self.out.write(text + "\n")
        self.at_line_start = True

    def show(self, part: Part) -> None:
        if isinstance(part, (TextDelta, ReasoningDelta)):
            if part.text:
                self.out.write(part.text)
                self.at_line_start = part.text.endswith("\n")
        elif isinstance(part, ToolCall):
            shown = part.input.get("command") if isinstance(part.input, dict) else None
            marker = self.c.tool(f"[{part.tool_name}]")
            self._line(f"{marker} {shown if isinstance(shown, str) else json.dumps(part.input)}")
        elif isinstance(part, ToolResult):
            if part.is_error:
                marker = self.c.bad(f"[{part.tool_name} error]")
            else:
                marker = self.c.ok(f"[{part.tool_name} ok]")
            self._line(f"{marker} {json.dumps(part.output, ensure_ascii=False)[:200]}")
        elif isinstance(part, StepReset):
            note = f"[step {part.step} restarted: {part.reason}; what it printed above is void]"
            self._line(self.c.note(note))
        elif isinstance(part, TurnFinish):
            reason = part.finish_reason + (f": {part.error}" if part.error else "")
            paint = self.c.ok if part.finish_reason == "stop" else self.c.bad
            self._line(f"{paint('[finished]')} {reason}")
        self.out.flush()


def _save_turn_state(state: TurnState) -> str:
    folder = os.path.join(user_home(), "turns")
    path = os.path.join(folder, f"{state.turn_id}.json")
    identity.secure_write(path, state.to_json().encode())
    return path


def _continue_command(path: str, args: argparse.Namespace, steps: int) -> str:
    words = ["bridge-client", "continue", path]
    if steps:
        words += ["--steps", str(steps)]
    if args.sandbox:
        keep = args.sandbox.startswith(_DOCKER_PREFIX)
        words += ["--sandbox", args.sandbox if keep else os.path.abspath(args.sandbox)]
    words += ["--agent", args.agent]
    for pair in args.option or []:
        words += ["--option", pair]
    return " ".join(shlex.quote(w) for w in words)


def _interrupt_once(signum: int, frame: Any) -> None:
    # A second Ctrl-C while the turn is being suspended would interrupt that too (and can
    # leave a lock half-taken inside threading.Condition): ignore any more.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def _progress(args: argparse.Namespace) -> Progress:
    """The spinner on stderr, when it is a terminal and ``-v`` does not log there."""
    return Progress(None if args.verbose else sys.stderr)


def _waiting_for(part: Part) -> str:
    """What the spinner says the turn is waiting for after ``part``."""
    if isinstance(part, ToolCall):
        return f"{part.tool_name} running"
    return "waiting for the agent"


def _stream(session: Session, turn: Any, args: argparse.Namespace, progress: Progress) -> int:
    as_json = args.json
    out = sys.stdout
    printer = _Printer(out)
    shared_terminal = is_terminal(out)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _interrupt_once)
    try:
        for part in turn:
            with progress.output(_waiting_for(part)):
                if as_json:
                    out.write(part.to_json() + "\n")
                    out.flush()
                else:
                    printer.show(part)
                # The spinner draws on its own line only: not after half a line of text.
                progress.may_draw = printer.at_line_start or not shared_terminal
    except KeyboardInterrupt:
        progress.close()
        state = turn.suspend()
        path = _save_turn_state(state)
        command = _continue_command(path, args, turn.steps)
        _say(f"\nsuspended; the turn goes on in the bridge. Continue it with:\n  {command}")
        return 130
    finish = turn.finish
    if finish is None:
        _say("bridge-client: the turn ended without turn-finish")
        return 1
    if finish.finish_reason != "stop":
        detail = f": {finish.error}" if finish.error else ""
        _say(f"bridge-client: turn finished with {finish.finish_reason}{detail}")
        return 1
    return 0


# ----------------------------------------------------------------------------- commands


def _cmd_run(args: argparse.Namespace) -> int:
    prompt = "\n".join(args.prompt)
    if not prompt.strip():
        raise UsageError("the prompt is empty")
    options, session_options = _session_options(args)
    progress = _progress(args)
    try:
        with create_session(options, session_options) as session:
            return _stream(session, session.turn(prompt), args, progress)
    finally:
        progress.close()


def _cmd_continue(args: argparse.Namespace) -> int:
    try:
        with open(args.turn_state_file, "rb") as f:
            state = TurnState.from_json(f.read())
    except OSError as exc:
        raise UsageError(f"cannot read {args.turn_state_file}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(f"{args.turn_state_file} is not a turn state: {exc}") from None
    if args.steps < 0:
        raise UsageError("--steps must be >= 0")
    if args.agent is None:
        args.agent = state.agent_id
    options, session_options = _session_options(args)
    progress = _progress(args)
    try:
        with create_session(options, session_options) as session:
            return _stream(session, session.continue_turn(state, steps=args.steps), args, progress)
    finally:
        progress.close()


def _bridge_rows(sandbox: Sandbox) -> List[Dict[str, Any]]:
    root = posixpath.join(sandbox.state_root, "bridges")
    local = isinstance(sandbox, LocalSandbox)
    try:
        names = sorted(os.listdir(root)) if local else _list_folder(sandbox, root)
    except FileNotFoundError:
        return []
    rows = []
    for name in names:
        folder = posixpath.join(root, name)
        row: Dict[str, Any] = {"id": name, "agent": "?", "pid": None, "port": None, "alive": False}
        try:
            row["agent"] = identity.parse_launch(
                sandbox.read_file(posixpath.join(folder, identity.LAUNCH_FILE))
            ).agent_id
        except (OSError, ValueError):
            pass
        try:
            info = identity.parse_listening(
                sandbox.read_file(posixpath.join(folder, identity.LISTENING_FILE))
            )
            row.update(pid=info.pid, port=info.port, alive=_healthy(sandbox, info.port))
        except (OSError, ValueError):
            pass
        if local:
            row.update(_store_counts(posixpath.join(folder, identity.STORE_FILE)))
        else:  # the store is inside a container: not opened from here
            row.update(sessions="?", turns="?")
        rows.append(row)
    return rows


def _list_folder(sandbox: Sandbox, folder: str) -> List[str]:
    """The names in a folder of a sandbox that is not on this machine (``ls`` in there)."""
    listed = sandbox.exec(["ls", "-1A", folder], cwd="/")
    if not listed.ok:
        raise FileNotFoundError(folder)
    return sorted(listed.stdout.decode("utf-8", "surrogateescape").split("\n")[:-1])


def _healthy(sandbox: Sandbox, port: int) -> bool:
    import requests

    from urllib.parse import quote

    from .client.transport import proxy_for

    endpoint = sandbox.expose(port)
    url = endpoint.url.replace("ws://", "http://", 1).replace("wss://", "https://", 1)
    try:
        with requests.Session() as http:
            # The same route as the WebSocket takes (client/transport.py): loopback direct,
            # proxies from the environment otherwise, the provider's headers.
            http.trust_env = False
            proxy = proxy_for(endpoint.url)
            if proxy is not None and proxy["proxy_type"] == "http":
                auth = proxy["http_proxy_auth"]
                who = f"{quote(auth[0], safe='')}:{quote(auth[1], safe='')}@" if auth else ""
                address = f"http://{who}{proxy['http_proxy_host']}:{proxy['http_proxy_port']}"
                http.proxies = {"http": address, "https": address}
            response = http.get(url.rstrip("/") + "/healthz", headers=dict(endpoint.headers), timeout=1.0)
            return response.status_code == 200 and response.json().get("protocol") is not None
    except (requests.RequestException, ValueError):
        return False


def _store_counts(path: str) -> Dict[str, Any]:
    import sqlite3

    if not os.path.exists(path):
        return {"sessions": 0, "turns": 0}
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1.0)
        try:
            sessions = db.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
            turns = db.execute("SELECT COUNT(*) FROM turns").fetchone()[0]
        finally:
            db.close()
    except sqlite3.Error:
        return {"sessions": "?", "turns": "?"}
    return {"sessions": sessions, "turns": turns}


def _cmd_bridges(args: argparse.Namespace) -> int:
    sandbox = _sandbox(args.sandbox)
    rows = _bridge_rows(sandbox)
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    if not rows:
        print(f"no bridges in {sandbox.workdir}")
        return 0
    header = ("BRIDGE ID", "AGENT", "PID", "PORT", "ALIVE", "SESSIONS", "TURNS")
    table = [header] + [
        (
            r["id"],
            r["agent"],
            str(r["pid"] or "-"),
            str(r["port"] or "-"),
            "yes" if r["alive"] else "no",
            str(r["sessions"]),
            str(r["turns"]),
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    return 0


_BRIDGE_ID = re.compile(r"[0-9a-f]{%d}\Z" % identity.BRIDGE_ID_LENGTH)


def _check_it_is_that_bridge(sandbox: Sandbox, info: identity.ListeningInfo, bridge_id: str) -> None:
    """Before a signal goes to a pid: the bridge must answer ``Hello`` with that bridge id and
    that pid (a stale listening file may name a pid the system gave to another process)."""
    token = hmac_token(default_secret())(sandbox.id)
    try:
        conn = Connection(sandbox.expose(info.port), token, open_timeout=5.0)
    except Unauthorized:
        raise HarnessError(
            f"bridge {bridge_id} refuses this user's token: it was launched with another secret"
        ) from None
    except ConnectionLost:
        raise UsageError(
            f"no running bridge {bridge_id} in {sandbox.workdir} (its listening file is stale)"
        ) from None
    try:
        hello = HelloResult.from_dict(conn.call("Hello", None, timeout=5.0))
    except HarnessError as exc:
        raise HarnessError(f"port {info.port} does not answer as bridge {bridge_id}: {exc}") from None
    finally:
        conn.close()
    if hello.bridge_id != bridge_id or hello.pid != info.pid:
        raise UsageError(
            f"no running bridge {bridge_id} in {sandbox.workdir} (port {info.port} is another program's)"
        )


def _cmd_stop(args: argparse.Namespace) -> int:
    sandbox = _sandbox(args.sandbox)
    if not _BRIDGE_ID.match(args.bridge_id):
        raise UsageError(
            f"{args.bridge_id!r} is not a bridge id (32 hex characters, from `bridge-client bridges`)"
        )
    folder = identity.state_dir(sandbox.state_root, args.bridge_id)
    listening = posixpath.join(folder, identity.LISTENING_FILE)
    try:
        info = identity.parse_listening(sandbox.read_file(listening))
    except FileNotFoundError:
        raise UsageError(f"no running bridge {args.bridge_id} in {sandbox.workdir}") from None
    except ValueError as exc:
        raise UsageError(f"bridge {args.bridge_id}: {exc}") from None
    _check_it_is_that_bridge(sandbox, info, args.bridge_id)
    result = sandbox.exec(["kill", "-TERM", str(info.pid)])
    if not result.ok:
        raise HarnessError(f"bridge {args.bridge_id} (pid {info.pid}) is not running")
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        try:
            sandbox.read_file(listening)
        except FileNotFoundError:
            print(f"stopped bridge {args.bridge_id} (pid {info.pid})")
            return 0
        time.sleep(0.05)
    raise HarnessError(f"bridge {args.bridge_id} (pid {info.pid}) did not stop within {args.timeout:g} s")


# ----------------------------------------------------------------------------- main


def _say(line: str) -> None:
    """Print one line on stderr, if there is one."""
    if sys.stderr is not None:
        try:
            print(line, file=sys.stderr)
        except OSError:
            pass


def _log_to_stderr() -> None:
    """``-v``: the ``bridge_client`` logger's DEBUG lines on stderr; other libraries' loggers
    stay as they are (the root logger is not configured)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s bridge-client: %(message)s"))
    logger = logging.getLogger("bridge_client")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> "NoReturn":  # type: ignore[name-defined]  # noqa: F821
        raise UsageError(message)


_AGENT_HELP = """agents:
  shell   each prompt line is a command, run by /bin/sh in the workspace, each in its own
          shell (so `cd` and `export` do not carry over to the next line); one step each.
          options: timeout=SECONDS (per command, default 600), keep_going=true (go on after
          a failing command), shell=PATH
  echo    answers with the prompt, deterministically (for demos and tests).
          options: steps=N, chunks=N (text parts per step), delay=SECONDS (before each part)
  openai  a coding agent over any OpenAI-compatible Chat Completions endpoint, with tools that
          run commands and read, write and list files in the workspace.
          options: model=NAME (required), base_url=URL, api_key_env=VAR (the variable that
          holds the key; never the key itself), max_steps=N, temperature=T, system=TEXT
  claude-code  the Claude Code CLI (claude -p, stream-json), resuming its own session.
          options: model=NAME, permission_mode=MODE, max_turns=N, extra_args=[...]
  codex   the Codex CLI (codex exec --json), resuming its own thread.
          options: model=NAME, sandbox=MODE, extra_args=[...]
  MODULE:CALLABLE  your own driver factory, called with the options as a dict
  (docs/drivers/ has a page per agent)
"""


def _add_agent_arguments(p: argparse.ArgumentParser, default_agent: Optional[str]) -> None:
    p.add_argument("--sandbox", metavar="DIR", help=_SANDBOX_HELP)
    p.add_argument(
        "--agent",
        default=default_agent,
        help="shell, echo, openai, claude-code, codex, or MODULE:CALLABLE (default: "
        + (default_agent or "the agent named in the turn state")
        + ")",
    )
    p.add_argument(
        "--option",
        action="append",
        metavar="KEY=VALUE",
        help="an agent option, repeatable; VALUE is read as JSON when it parses, else as text",
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
    run.add_argument("prompt", nargs="+", metavar="PROMPT", help="the prompt; several are joined as lines")
    _add_agent_arguments(run, "shell")
    run.set_defaults(func=_cmd_run)

    cont = commands.add_parser(
        "continue",
        help="continue a suspended turn",
        description="Read a turn again from its saved state, in the bridge that runs it (use the "
        "same --sandbox, --agent and --option values as the run).",
        epilog=_AGENT_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cont.add_argument("turn_state_file", metavar="TURN_STATE_FILE")
    cont.add_argument("--steps", type=int, default=0, help="complete steps you already have (skipped)")
    _add_agent_arguments(cont, None)
    cont.set_defaults(func=_cmd_continue)

    bridges = commands.add_parser("bridges", help="list the bridges of a sandbox")
    bridges.add_argument(
        "--sandbox", metavar="DIR", help=_SANDBOX_HELP
    )
    bridges.add_argument("--json", action="store_true", help="print one JSON object per bridge")
    _add_verbose(bridges)
    bridges.set_defaults(func=_cmd_bridges)

    stop = commands.add_parser("stop", help="stop a bridge cleanly")
    stop.add_argument("bridge_id", metavar="BRIDGE_ID", help="an id from `bridge-client bridges`")
    stop.add_argument("--sandbox", metavar="DIR", help=_SANDBOX_HELP)
    stop.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for it to exit")
    _add_verbose(stop)
    stop.set_defaults(func=_cmd_stop)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run ``bridge-client`` with ``argv`` (default: ``sys.argv[1:]``); return the exit status.

    Errors are one line on stderr, never a traceback: 2 for bad input, 1 for failures.
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
    except HarnessError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        _say(f"bridge-client: {type(exc).__name__}: {first}")
        tail = getattr(exc, "log_tail", "")
        if tail:
            _say(tail)
        return 1
    except KeyboardInterrupt:
        _say("bridge-client: interrupted")
        return 130
    except BrokenPipeError:
        return 1
    except OSError as exc:  # stdout closed or full
        _say(f"bridge-client: cannot write the output: {exc.strerror or exc}")
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""The ``bridge-client`` command line's shared parts: the parser that turns bad input into
:class:`~bridge_client.cli.exits.UsageError`, the options every command that runs an agent
takes (``--sandbox``, ``--agent``, ``--option``, ``--env``, ``--json``, ``-v``, ``--approve``),
their help texts, and how ``--option`` and ``--env`` values are read. See the *Command line*
guide (``cli``).
"""
from __future__ import annotations

import argparse
import json
import os
from typing import Any, Dict, NoReturn, Optional, Sequence

from ..wire.rpcs import MAX_APPROVAL_TIMEOUT
from .exits import UsageError

__all__ = [
    "Parser",
    "SANDBOX_HELP",
    "AGENT_HELP",
    "APPROVE_MODES",
    "parse_options",
    "parse_env",
    "one_of",
    "add_agent_arguments",
    "add_verbose",
    "add_approve_arguments",
    "approval_timeout",
    "approvals_on",
]


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors raise :class:`UsageError` (one line, exit status 2)."""

    def error(self, message: str) -> NoReturn:
        """Raise :class:`UsageError` with ``message``."""
        raise UsageError(message)


def parse_options(pairs: Sequence[str]) -> Dict[str, Any]:
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


def parse_env(items: Sequence[str]) -> Dict[str, str]:
    """``--env NAME`` (the value from this environment) and ``--env NAME=VALUE`` to a dict.
    Messages name the variable, never its value."""
    out: Dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not name:
            raise UsageError("--env =...: the variable's name is empty (use --env NAME or --env NAME=VALUE)")
        if not sep:
            if name not in os.environ:
                raise UsageError(
                    f"--env {name}: {name} is not set in this environment (or use --env {name}=VALUE)"
                )
            value = os.environ[name]
        out[name] = value
    return out



SANDBOX_HELP = (
    "the workspace folder (default: the current folder), docker:IMAGE for a container of "
    "IMAGE (made once, then reused; see the Docker sandbox guide), ssh://USER@HOST[:PORT]/PATH "
    "for a folder on another machine, or docker+tcp://HOST:PORT/NAME, docker+ssh://USER@HOST/NAME "
    "for a container on another machine's engine (see the Scaling guide)"
)

AGENT_HELP = """agents and their --option keys:
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
  claude-code  the Claude Code CLI (claude -p, stream-json), one warm process per session.
          executable=PATH, model=NAME, permission_mode=MODE (default: the CLI's own checks
          in a local folder, bypassPermissions in a container), max_turns=N,
          append_system_prompt=TEXT, allowed_tools=[...], extra_args=[...],
          include_partial_messages=BOOL (true), continue_prompt=TEXT, interrupt_grace=SECONDS (5),
          agent_idle_timeout=SECONDS (600: a warm process unused that long is stopped)
  codex   the Codex CLI (codex exec --json), resuming its own thread.
          executable=PATH, model=NAME, sandbox=MODE (default workspace-write in a local
          folder, danger-full-access in a container), skip_git_repo_check=BOOL (true),
          extra_args=[...], continue_prompt=TEXT, interrupt_grace=SECONDS (5)
  gemini  the Gemini CLI (gemini --output-format stream-json), resuming its own session.
          executable=PATH, model=NAME, approval_mode=MODE (default: the CLI's own checks in
          a local folder, yolo in a container), extra_args=[...], continue_prompt=TEXT,
          interrupt_grace=SECONDS (5)
  qwen    the Qwen Code CLI (stream-json like claude-code), one warm process per session.
          executable=PATH, model=NAME, approval_mode=MODE (as gemini), append_system_prompt=TEXT,
          include_partial_messages=BOOL (true), extra_args=[...], continue_prompt=TEXT,
          interrupt_grace=SECONDS (5), agent_idle_timeout=SECONDS (600)
  pi      the pi coding agent (pi --mode rpc), one warm process per session; it has no
          permission checks of its own: restrict it with tools=[...].
          executable=PATH, provider=NAME, model=NAME, thinking=LEVEL, tools=[...],
          append_system_prompt=TEXT, extra_args=[...], continue_prompt=TEXT,
          interrupt_grace=SECONDS (5), agent_idle_timeout=SECONDS (600)
  acp     any agent that speaks the Agent Client Protocol on its stdio (one process per
          session, its ACP session id kept in the session state).
          command=PROGRAM (required), args=[...], permission=reject|allow|allow_always
          (how the agent's permission requests are answered; default reject),
          fs=false (do not serve the client file methods), continue_prompt=TEXT,
          interrupt_grace=SECONDS (5), start_timeout=SECONDS (60), auth_method=ID,
          mcp_servers=[...], max_agents=N (8), agent_idle_timeout=SECONDS (600)
  opencode  OpenCode in its ACP mode (opencode acp), on the acp driver.
          executable=PATH, base_url=URL (an OpenAI-compatible server; needs model),
          model=NAME, api_key_env=VAR (default OPENAI_API_KEY), extra_args=[...],
          permission=reject|allow|allow_always, continue_prompt=TEXT,
          interrupt_grace=SECONDS, start_timeout=SECONDS, max_agents=N, agent_idle_timeout=SECONDS
  copilot the GitHub Copilot CLI in its ACP mode (copilot --acp), on the acp driver.
          executable=PATH, base_url=URL, provider_type=openai|azure|anthropic, model=NAME,
          extra_args=[...], and the acp options of opencode (permission=...
          to agent_idle_timeout=...)
  codex-acp  Zed's codex-acp (Codex over ACP), on the acp driver.
          executable=PATH, base_url=URL, model=NAME, api_key_env=VAR,
          sandbox=read-only|workspace-write|danger-full-access, extra_args=[...], and the
          acp options of opencode
  cline   the Cline CLI in its ACP mode (cline --acp), on the acp driver.
          executable=PATH, base_url=URL, model=NAME (default gpt-4o), api_key_env=VAR,
          extra_args=[...], and the acp options of opencode
  vibe    Mistral Vibe (vibe-acp), on the acp driver.
          executable=PATH, base_url=URL (needs model), model=NAME, api_key_env=VAR,
          extra_args=[...], and the acp options of opencode
  aider   Aider, run once per turn; its tool is its edit blocks (no shell tool).
          executable=PATH, model=NAME (openai/ID with base_url), base_url=URL,
          api_key_env=VAR, edit_format=FORMAT (diff), extra_args=[...],
          continue_prompt=TEXT, interrupt_grace=SECONDS (5)
  MODULE:CALLABLE  your own driver factory, called with the options as a dict; loaded by
          the bridge's Python in the sandbox folder, like the bridge does
  The named agents install their CLI (from npm, or into a private venv for vibe and aider)
  when the sandbox lacks it and no executable is given: for a local folder into a private
  prefix under its state root, never npm install -g (said on stderr first). The Drivers
  guides of the docs have a page per agent.
"""


def add_agent_arguments(p: argparse.ArgumentParser, default_agent: Optional[str]) -> None:
    p.add_argument(
        "--sandbox",
        metavar="DIR",
        help=SANDBOX_HELP if default_agent else SANDBOX_HELP.replace(
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
        "value from this environment, NAME=VALUE gives it (in this command's argv, which ps shows: "
        "give a secret as NAME); sent to the bridge on each connection, never stored or logged "
        "there, and a running bridge is reused",
    )
    p.add_argument("--json", action="store_true", help="print one JSON part per line")
    add_verbose(p)


def add_verbose(p: argparse.ArgumentParser) -> None:
    """``-v`` after the command too (``bridge-client run -v ...``); SUPPRESS keeps the value
    given before the command."""
    p.add_argument(
        "-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
        help="log what the client does on stderr (DEBUG)",
    )


APPROVE_MODES = ("ask", "all", "none")
"""The values of ``--approve``."""

_APPROVE_HELP = (
    "let the agent ask before it runs a tool (off unless given): ask = a question on the "
    "terminal for each request, where Ctrl-C or end of input answers no (with --json or off a "
    "terminal, answer from another shell with `bridge-client answer`), all = allow every "
    "request, none = deny every one"
)
_STATE_HELP = (
    "write the turn's state to FILE when the turn starts (mode 0600), for `bridge-client answer` "
    "and `bridge-client say` from another shell (default with --approve: the file a suspend "
    "writes, said on standard error with --approve ask)"
)


def one_of(names: Sequence[str]) -> Any:
    """An argparse ``type`` that takes one of ``names`` (a ``choices=`` tuple would break the
    walk over sub-command parsers that reads every action's ``choices`` as parsers)."""

    def check(value: str) -> str:
        if value not in names:
            raise argparse.ArgumentTypeError(f"{value!r} is not one of {', '.join(names)}")
        return value

    return check


_APPROVAL_TIMEOUT_HELP = (
    "with --approve: seconds a request waits for its answer before the bridge denies it "
    "(recorded as answered by timeout; default: it waits for ever)"
)


def approval_timeout(value: str) -> float:
    """An argparse ``type`` for ``--approval-timeout``: a number of seconds > 0, at most a
    year (what the bridge accepts).

    Raises:
        argparse.ArgumentTypeError: anything else (a usage error, exit 2).
    """
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds <= MAX_APPROVAL_TIMEOUT:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a number of seconds > 0 (at most {MAX_APPROVAL_TIMEOUT:.0f}, a year)"
        )
    return seconds


def add_approve_arguments(p: argparse.ArgumentParser, state: bool) -> None:
    """Add ``--approve`` and ``--approval-timeout`` (and ``--state FILE`` when ``state``) to a
    ``run``-like command."""
    p.add_argument("--approve", type=one_of(APPROVE_MODES), metavar="ask|all|none", help=_APPROVE_HELP)
    p.add_argument(
        "--approval-timeout", type=approval_timeout, metavar="SECONDS", help=_APPROVAL_TIMEOUT_HELP
    )
    if state:
        p.add_argument("--state", metavar="FILE", help=_STATE_HELP)


def approvals_on(args: argparse.Namespace) -> bool:
    """True when the command line turned approvals on (``--approve`` given)."""
    return getattr(args, "approve", None) is not None

"""The ``aider`` driver: runs Aider (PyPI ``aider-chat``) once per turn inside the sandbox and
maps what it prints onto parts. See its page, :doc:`drivers/aider`.

Aider has no shell tool and no JSON output: the model answers in Aider's edit format
(SEARCH/REPLACE blocks, ``--edit-format diff``) and Aider applies the edits to the files of
the workspace. Each turn runs, in the workspace::

    aider --model M --edit-format diff --no-git --yes-always --no-pretty --map-tokens 0
          --chat-history-file F --input-history-file F2 --restore-chat-history
          [--model-metadata-file F3] (quiet flags) [EXTRA_ARGS...] --message PROMPT

(stdin closed). ``--yes-always`` answers Aider's own questions (create a new file, edit a
file not in the chat) with yes; shell commands the model suggests are never run (Aider asks
an explicit yes for those, and ``--yes-always`` does not give it).

What its output becomes (one line at a time, as Aider prints it):

- the banner (``Aider v...``, ``Model:``, ``Git repo:``, ``Repo-map:``, the restored history
  notice): ``data`` ``aider-info``;
- the model's answer, up to Aider's ``Tokens:`` line: ``text-delta`` parts, one per line;
- each ``Applied edit to PATH``: a ``tool-call`` ``edit`` (``{"path": PATH}``) and its
  ``tool-result`` (``"applied"``); a SEARCH block that matched nothing in PATH (Aider's
  ``SearchReplaceNoExactMatch`` line): a ``tool-call`` and an error ``tool-result`` with that
  line (Aider then sends the error back to the model, up to three times);
- any other line after the answer: ``data`` ``aider-output``.

A run is one step (``stop``). A run that exits non-zero ends the turn with ``error`` and the
tail of its output.

Conversation: each session has its own chat history file under the bridge's state
directory (``aider/<session id>/``); the next turn's run restores it
(``--restore-chat-history``), so the model sees the earlier turns.

Model server: ``base_url`` is ``OPENAI_API_BASE``; the key is read from the variable
``api_key_env`` names (default ``OPENAI_API_KEY``) of the session's environment and given
to Aider as ``OPENAI_API_KEY``. ``LITELLM_LOCAL_MODEL_COST_MAP=True`` keeps litellm from
fetching its price list; with ``base_url``, the driver also gives Aider a model-metadata file
for ``model`` (a model of your own server is unknown to Aider, which would otherwise try to
fetch the price list from the internet).

Not supported: approvals (Aider asks its own questions as terminal prompts without a line
end; the driver answers them yes and relays none: ``ApprovalsUnsupported``),
messages to a running turn (``MessagesUnsupported``), host tools (Aider has no MCP;
``ToolsUnsupported``). Cancel: SIGINT to its process group, killed ``interrupt_grace``
seconds later.

Options (``agent_options``, a JSON object or null):
    executable: the program; given, it is run as is and never installed. Default: ``aider``
        on ``PATH``, else the copy the template installed in the sandbox's private venv.
    model: ``--model`` (required with ``base_url``; ``openai/<id>`` for an OpenAI-compatible
        server).
    base_url: the OpenAI-compatible server (``http://127.0.0.1:8000/v1``).
    api_key_env: the session's variable holding the key (default ``OPENAI_API_KEY``).
    edit_format: ``--edit-format`` (default ``diff``).
    extra_args: a list of further arguments (before ``--message``).
    continue_prompt: the prompt that continues a turn cut by a restart.
    interrupt_grace: seconds >= 0 between SIGINT and killing Aider (default 5).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from typing import Any, Dict, List, Optional

from ..bridge.driver import TurnContext, TurnResult
from ..driver_options import check_agent_options
from .claude_code import DEFAULT_CONTINUE_PROMPT
from .cli_install import find_cli
from .cli_process import CLIRuns, CLIStartError, Event, JsonLinesProcess, summarize
from .workspace import workspace_dir

__all__ = ["AiderDriver", "make_driver", "QUIET_FLAGS"]

QUIET_FLAGS = (
    "--no-git",
    "--yes-always",
    "--no-pretty",
    "--no-fancy-input",
    "--no-check-update",
    "--no-show-release-notes",
    "--no-analytics",
    "--no-show-model-warnings",
    "--no-detect-urls",
    "--no-suggest-shell-commands",
    "--no-notifications",
)
"""Flags every run gets: no git, no questions, plain output, nothing fetched or sent."""

_BANNER = re.compile(
    r"^(Aider v\S+|Model: |Weak model: |Git repo: |Repo-map: |Restored previous conversation)"
)
_TOKENS = re.compile(r"^Tokens: .*(sent|received)")
_APPLIED = re.compile(r"^Applied edit to (.+)$")
_FAILED = re.compile(
    r"^(?:## SearchReplaceNoExactMatch: This SEARCH block failed to exactly match lines in"
    r"|Failed to apply edit to) (.+)$"
)


class _Mapper:
    """Maps one run's lines onto ``ctx``."""

    def __init__(self, ctx: TurnContext) -> None:
        self.ctx = ctx
        self.answering = False  # between the banner and the Tokens: line
        self.answered = False
        self.edits = 0
        self.tail: List[str] = []

    def on_event(self, event: Event) -> bool:
        line = event.line.rstrip()
        self.tail = (self.tail + [line])[-8:]
        ctx = self.ctx
        if ctx.step is None:
            ctx.start_step()
        if not self.answered and _BANNER.match(line):
            ctx.data("aider-info", {"line": line})
        elif not self.answered and _TOKENS.match(line):
            self.answered, self.answering = True, False
            ctx.data("aider-info", {"line": line})
        elif not self.answered:
            if line or self.answering:
                self.answering = True
                ctx.text(line + "\n")
        elif _APPLIED.match(line):
            self._edit(_APPLIED.match(line).group(1), "applied", False)  # type: ignore[union-attr]
        elif _FAILED.match(line):
            self._edit(_FAILED.match(line).group(1), line, True)  # type: ignore[union-attr]
        elif line:
            ctx.data("aider-output", {"line": line})
        return False

    def _edit(self, path: str, output: str, failed: bool) -> None:
        self.edits += 1
        call_id = f"aider-edit-{self.ctx.turn_id}-{self.edits}"
        self.ctx.tool_call(call_id, "edit", {"path": path.strip()})
        self.ctx.tool_result(call_id, "edit", output, failed)


class AiderDriver:
    """The Aider agent (``agent_id`` ``"aider"``); see the module docstring.

    Args:
        options: the checked options (see :func:`make_driver`).
    """

    agent_id = "aider"
    supports_approvals = False  # its questions are terminal prompts, answered by --yes-always
    supports_messages = False
    supports_host_tools = False  # no MCP
    program = "aider"
    package = "aider-chat"
    version = "0.86.2"

    def __init__(self, options: Dict[str, Any]) -> None:
        self.executable: str = find_cli(self.program, self.package, self.version, options.get("executable"))
        self.model: Optional[str] = options.get("model")
        self.base_url: Optional[str] = options.get("base_url")
        self.api_key_env: str = options.get("api_key_env") or "OPENAI_API_KEY"
        self.edit_format: str = options.get("edit_format") or "diff"
        self.extra_args: List[str] = list(options.get("extra_args") or [])
        self.continue_prompt: str = options.get("continue_prompt") or DEFAULT_CONTINUE_PROMPT
        self.interrupt_grace: float = float(options.get("interrupt_grace", 5.0))
        self._runs = CLIRuns()

    def initial_state(self) -> Any:
        """A new session's data: ``{}`` (its chat history is a file of the session's own)."""
        return {}

    def session_dir(self, session_id: str) -> str:
        """The folder of the session's chat and input history (created on use)."""
        from . import STATE_DIR

        root = STATE_DIR or os.path.join(tempfile.gettempdir(), "bridge-client-aider")
        path = os.path.join(root, "aider", session_id)
        os.makedirs(path, mode=0o700, exist_ok=True)
        return path

    def argv(self, folder: str, prompt: str) -> List[str]:
        """The command line of one run (``folder``: the session's history folder)."""
        argv = [self.executable]
        if self.model:
            argv += ["--model", self.model]
        argv += ["--edit-format", self.edit_format, "--map-tokens", "0", *QUIET_FLAGS]
        argv += ["--chat-history-file", os.path.join(folder, "chat.md")]
        argv += ["--input-history-file", os.path.join(folder, "input.history"), "--restore-chat-history"]
        if self.base_url and self.model:
            argv += ["--model-metadata-file", self._metadata(folder)]
        return argv + self.extra_args + ["--message", prompt]

    def _metadata(self, folder: str) -> str:
        path = os.path.join(folder, "model-metadata.json")
        info = {
            "max_input_tokens": 128000,
            "max_output_tokens": 8192,
            "input_cost_per_token": 0,
            "output_cost_per_token": 0,
            "litellm_provider": "openai",
            "mode": "chat",
        }
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({self.model: info}, f)
        os.replace(tmp, path)
        return path

    def env(self, ctx: TurnContext) -> Dict[str, str]:
        """The variables of a run over the session's (see the module docstring)."""
        # COLUMNS: Aider wraps its own lines at the console's width; one line must stay one.
        env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "AIDER_ANALYTICS": "false", "COLUMNS": "100000"}
        if self.base_url:
            env["OPENAI_API_BASE"] = self.base_url
        key = ctx.env.get(self.api_key_env) or os.environ.get(self.api_key_env)
        if key:
            env["OPENAI_API_KEY"] = key
        return env

    def run_turn(self, ctx: TurnContext) -> TurnResult:
        """Run Aider once for the turn.

        Returns:
            ``stop`` when Aider exits 0; ``error`` when it cannot be started or exits
            non-zero; ``cancelled`` after a cancel.
        """
        prompt = self.continue_prompt if ctx.completed_steps > 0 else ctx.prompt
        try:
            folder = self.session_dir(ctx.session_id)
            proc = JsonLinesProcess(self.argv(folder, prompt), workspace_dir(), env=self.env(ctx))
        except CLIStartError as exc:
            return TurnResult("error", error=f"{exc} (is Aider installed? the aider template installs it)")
        except OSError as exc:
            return TurnResult("error", error=f"aider: cannot prepare the session's history: {exc}")
        mapper = _Mapper(ctx)
        early = self._runs.run(proc, ctx.cancelled, mapper.on_event, self.interrupt_grace)
        code = early.code if early is not None else proc.proc.returncode
        if ctx.cancelled.is_set():
            if ctx.step is not None:
                ctx.finish_step("cancelled")
            return TurnResult("cancelled")
        if code != 0:
            if ctx.step is not None:
                ctx.finish_step("error")
            tail = proc.stderr_tail() or " | ".join(t for t in mapper.tail if t)
            detail = f": {summarize(tail)}" if tail else ""
            return TurnResult("error", error=f"aider exited (status {code}){detail}")
        if ctx.step is None:
            ctx.start_step()
        ctx.finish_step("stop")
        return TurnResult("stop")

    def close(self) -> None:
        """Kill every running Aider's process group (the bridge is shutting down)."""
        self._runs.stop_all()


def make_driver(options: Any) -> AiderDriver:
    """Make the aider driver from its options (see the module docstring).

    Raises:
        ValueError: an option is unknown or of the wrong type.
    """
    return AiderDriver(check_agent_options("aider", options))

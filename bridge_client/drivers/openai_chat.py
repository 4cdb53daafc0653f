"""The ``openai`` driver: a coding agent loop over any OpenAI-compatible Chat Completions
endpoint (OpenAI, vLLM, Ollama, llama.cpp server), streamed with server-sent events, with
workspace tools (:mod:`bridge_client.drivers.tools`: ``run_command``, ``read_file``,
``write_file``, ``list_dir``).

Where the format comes from: the Chat Completions streaming format of the OpenAI API
reference ("Create chat completion", ``stream: true``: ``data: {chat.completion.chunk}``
lines, ``choices[].delta`` with ``content`` and ``tool_calls[]`` fragments keyed by
``index``, ``finish_reason``, a last chunk with ``usage`` when
``stream_options.include_usage``, then ``data: [DONE]``), as the ``openai/openai-python``
SDK reads it (``src/openai/_streaming.py``: an SSE event per blank-line-separated block,
``data:`` lines joined, ``[DONE]`` ends). ``delta.reasoning_content`` (vLLM, DeepSeek) and
``delta.reasoning`` (Ollama, OpenRouter) carry reasoning.

One step is one model call plus the tool calls it asked for:

- ``delta.content`` → ``text-delta``, as it streams; ``delta.reasoning_content`` /
  ``delta.reasoning`` → ``reasoning-delta``.
- When the answer is complete, each tool call (its fragments joined by ``index``) →
  ``tool-call`` (``input``: the parsed arguments, or the raw text when they are not JSON),
  then runs in order → ``tool-result``.
- ``step-finish`` with the call's ``finish_reason`` (``tool_calls`` or ``stop`` ...) and its
  ``usage``.

Interactive turns (see the *Interactive turns* guide, :doc:`interactive`): with approvals
on, each tool call is asked about first (``approval-request``: the tool's name, its arguments,
a title such as ``run_command: rm -rf build``); a denial does not run it, and its
``tool-result`` (an error) tells the model that the user denied it, with the user's message.
A message the user sends to the running turn is added to the conversation as a user message
before the next model call; one that comes while the model gives its final answer gets one
more model call.

The loop ends when the model answers without tool calls (``turn-finish`` ``stop``) or after
``max_steps`` steps (``max-steps``); the turn's usage sums the steps'.

HTTP errors: a connection error, a timeout, 429 and 5xx are retried with exponential backoff
(tenacity, ``max_retries`` times, ``Retry-After`` honoured up to ``backoff_max``), each
retry announced by a ``data`` part ``openai-retry`` (the error, the try, the wait); any other
4xx ends the turn with ``turn-finish`` ``error`` and the endpoint's message. A stream cut
mid-answer (no ``finish_reason``, or a broken connection) abandons the step's attempt with
``step-reset`` and runs the step again (at most ``max_retries`` times). Cancel closes the
model stream, or kills a running command, at once.

What survives a restart: the conversation (``{"messages": [...]}``, without the
system prompt) is the session state, stored before each ``step-finish``, so a fresh bridge
goes on with the same conversation, and a turn continued after a restart re-runs only its
unfinished step. A step whose answer was complete is replayed rather than asked of the model
again, and a tool call never runs twice: the answer and each tool's result are journaled in the
state directory (:mod:`bridge_client.drivers.openai_resume`), and a ``run_command`` runs under
its keeper (:class:`~bridge_client.drivers.keeper.KeptCommand`), which finishes and records it
when the bridge dies.

The API key is never an option: ``api_key_env`` names the environment variable that holds
it (``agent_options`` are stored in the sandbox and hashed into the bridge id), read at each
request from the session's environment (``CreateSessionOptions.env``), else the bridge's
own. A key is required for the default endpoint and whenever ``api_key_env`` is given: a
turn without it ends at once with ``error`` naming the variable. With only ``base_url`` (a
local server) a missing key sends no ``Authorization``. A ``base_url`` whose host name does
not resolve ends the turn at once too (it is not retried like a busy server).

Options (``agent_options``, a JSON object):
    model: the model name (required).
    base_url: the API root, e.g. ``http://localhost:11434/v1`` (default
        ``https://api.openai.com/v1``); requests go to ``{base_url}/chat/completions``.
    api_key_env: the variable holding the key (default ``OPENAI_API_KEY``).
    max_steps: integer >= 1 (default 20). temperature: number >= 0 (default: the server's).
    system: the system prompt (default: a short coding-agent prompt).
    max_retries: integer >= 0 (default 5). backoff_initial, backoff_max: seconds (default 1
        and 30). request_timeout: seconds to connect and between two reads of the stream
        (default 300). command_timeout: the longest a ``run_command`` may take, seconds
        (default 300). max_output: characters of a tool's output kept (default 20000).
    include_usage: send ``stream_options.include_usage`` (default true; some older servers
        refuse it).
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Tuple

from ..bridge.driver import TurnContext, TurnResult
from ..driver_options import check_agent_options
from .openai_http import ChatEndpoint, _Cut, _Fatal, byte_lines, sse_data
from .openai_http import _abort, _arriving  # noqa: F401 - read here by tests
from .openai_stream import _Answer, apply_chunk, read_answer
from .openai_stream import _flush  # noqa: F401 - read here by tests
from .stream_control import approval_title
from .acp_journal import ToolJournal
from .keeper import KeptCommand
from .openai_host import function_specs, run_host_tool
from .openai_resume import earlier_result, note_step, replayed_step, step_journal
from .tools import TOOL_NAMES, TOOL_SPECS, command_result, run_tool
from .workspace import workspace_dir

__all__ = ["OpenAIChatDriver", "make_driver", "DEFAULT_SYSTEM", "sse_data", "byte_lines"]

DEFAULT_SYSTEM = (
    "You are a coding agent working in a workspace folder. Use the tools to inspect and change "
    "files and to run commands; paths are relative to the workspace. When the task is done, "
    "answer with a short summary and no tool call."
)


class OpenAIChatDriver:
    """The OpenAI-compatible coding agent (``agent_id`` ``"openai"``); see the module docstring.

    Args:
        options: the checked options (see :func:`make_driver`).
    """

    agent_id = "openai"
    supports_approvals = True
    supports_messages = True
    supports_host_tools = True  # native function tools (drivers.openai_host)
    tool_names = TOOL_NAMES  # host tools may not take these names

    def __init__(self, options: Dict[str, Any]) -> None:
        self.model: str = options["model"]
        self.base_url: str = options.get("base_url", "https://api.openai.com/v1").rstrip("/")
        self.api_key_env: str = options.get("api_key_env", "OPENAI_API_KEY")
        # A key is needed by the default endpoint and whenever api_key_env is named; a local
        # server given by base_url alone may go without.
        self.key_required: bool = "api_key_env" in options or "base_url" not in options
        self.max_steps: int = options.get("max_steps", 20)
        self.temperature: Optional[float] = options.get("temperature")
        self.system: str = options.get("system") or DEFAULT_SYSTEM
        self.max_retries: int = options.get("max_retries", 5)
        self.backoff_initial: float = float(options.get("backoff_initial", 1.0))
        self.backoff_max: float = float(options.get("backoff_max", 30.0))
        self.request_timeout: float = float(options.get("request_timeout", 300.0))
        self.command_timeout: float = float(options.get("command_timeout", 300.0))
        self.max_output: int = options.get("max_output", 20000)
        self.include_usage: bool = options.get("include_usage", True)
        self._endpoint = ChatEndpoint(
            self.base_url,
            self.api_key_env,
            self.max_retries,
            self.backoff_initial,
            self.backoff_max,
            self.request_timeout,
        )

    def turn_finished(self, session_id: str, turn_id: str) -> None:
        """The turn's ``turn-finish`` is committed: its commands' records go."""
        KeptCommand.forget_turn(session_id, turn_id)

    def initial_state(self) -> Any:
        """A new session's data: ``{"messages": []}`` (the conversation, without the system prompt)."""
        return {"messages": []}

    # ------------------------------------------------------------------ the loop

    def run_turn(self, ctx: TurnContext) -> TurnResult:
        """Run model calls and tools until the model stops calling tools or ``max_steps``.

        Returns:
            ``stop``, ``max-steps``, ``cancelled``, or ``error`` with the endpoint's message.
        """
        if self.key_required and not self._key(ctx):
            return TurnResult("error", None, self._missing_key())
        data = ctx.state.data
        messages: List[Any] = list(data.get("messages", [])) if isinstance(data, dict) else []
        if ctx.completed_steps == 0:
            messages.append({"role": "user", "content": ctx.prompt})
        total: Dict[str, int] = {}
        journal = step_journal(ctx)
        replay = replayed_step(journal, ctx.completed_steps)  # the cut step's answer, if any
        for _ in range(ctx.completed_steps, self.max_steps):
            if ctx.cancelled.is_set():
                return TurnResult("cancelled")
            if replay is not None:
                assistant, finish_reason, usage = replay
                ctx.start_step()
                messages += _user_messages(ctx)  # what the cut attempt had taken, handed again
                if isinstance(assistant.get("content"), str) and assistant["content"]:
                    ctx.text(assistant["content"])
                calls = [
                    (c["id"], c["function"]["name"], c["function"]["arguments"])
                    for c in assistant.get("tool_calls") or []
                ]
            else:
                try:
                    answer = self._step(ctx, messages)
                except _Fatal as exc:
                    if ctx.step is not None:
                        ctx.finish_step("error")
                    return TurnResult("error", total or None, str(exc))
                if answer is None:  # cancelled (the runner closes an open step)
                    return TurnResult("cancelled")
                finish_reason, usage, calls = answer.finish_reason, answer.usage, answer.tool_calls
                assistant = {"role": "assistant", "content": answer.text or None}
                if calls:
                    assistant["tool_calls"] = [
                        {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                        for cid, name, args in calls
                    ]
                    assert ctx.step is not None
                    note_step(journal, ctx.step, assistant, finish_reason, usage)
            _add_usage(total, usage)
            messages.append(assistant)
            for cid, name, args in calls:
                output, is_error = self._tool(ctx, journal, replay is not None, cid, name, args)
                content = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
                messages.append({"role": "tool", "tool_call_id": cid, "content": content})
                if ctx.cancelled.is_set():
                    break
            replay = None
            # A message that came while the model answered without tools: one more step for it.
            later = _user_messages(ctx) if not calls and not ctx.cancelled.is_set() else []
            messages += later
            ctx.set_state({"messages": messages})  # checkpointed by finish_step: a restart continues from it
            ctx.finish_step(finish_reason, usage)
            if ctx.cancelled.is_set():
                return TurnResult("cancelled", total or None)
            if not calls and not later:
                journal.discard()
                return TurnResult("stop", total or None)
        return TurnResult("max-steps", total or None)

    def _tool(
        self,
        ctx: TurnContext,
        journal: ToolJournal,
        replaying: bool,
        cid: str,
        name: str,
        args: str,
    ) -> Tuple[Any, bool]:
        """Emit one tool call of the open step, run it (or take the result an earlier run of
        the step had: :mod:`.openai_resume`), journal its result and emit it. Returns
        ``(output, is_error)``. The keeper's record names the call by its step and id (a
        model may give the calls of two steps the same ids; a turn's records stay until it
        ends)."""
        try:
            parsed = json.loads(args) if args.strip() else {}
        except ValueError as exc:
            ctx.tool_call(cid, name, args)
            output: Any = f"the arguments are not valid JSON ({exc}); call the tool again"
            ctx.tool_result(cid, name, output, True)
            return output, True
        ctx.tool_call(cid, name, parsed)
        command = parsed.get("command") if isinstance(parsed, dict) and name == "run_command" else None
        # (a host tool may not take a built-in tool's name: this is the workspace's)
        folder, key = None, f"{ctx.step}:{cid}"
        if isinstance(command, str):
            folder = KeptCommand.folder_for(ctx.session_id, ctx.turn_id, key, command)
        done = earlier_result(journal, cid) if replaying else None
        kept = KeptCommand.adopt(folder) if replaying and done is None else None
        if done is not None:
            output, is_error = done
        elif kept is not None:  # started by the cut attempt: its result, not a second run
            output, is_error = command_result(kept, ctx.cancelled, self.max_output)
        else:
            denied = _denied(ctx, cid, name, parsed)
            if denied is not None:
                output, is_error = denied, True
            else:
                output, is_error = run_host_tool(ctx, cid, name, parsed) or run_tool(
                    name, parsed, workspace_dir(), ctx.cancelled,
                    self.command_timeout, self.max_output, record=folder,
                )
        journal.completed(cid, name, parsed, output, is_error)  # before the part (the module)
        ctx.tool_result(cid, name, output, is_error)
        return output, is_error

    def _key(self, ctx: TurnContext) -> Optional[str]:
        """The API key: the session's variable ``api_key_env`` first, then the bridge's own."""
        return ctx.env.get(self.api_key_env) or os.environ.get(self.api_key_env) or None

    def _missing_key(self) -> str:
        name = self.api_key_env
        return (
            f"{name} is not set: the model endpoint {self.base_url} needs an API key; give the "
            f"session the variable (CreateSessionOptions(env={{'{name}': Redacted(...)}}), or "
            f"bridge-client run --env {name}), or set it in the sandbox's environment; a bridge "
            f"already running keeps the environment it was launched with and does not see {name} "
            "set later in your shell"
        )

    def _step(self, ctx: TurnContext, messages: List[Any]) -> Optional[_Answer]:
        """Open a step and stream one model answer into it; on a cut, ``step-reset`` and again.

        The user messages sent to the running turn are taken inside the step (so an attempt
        that is abandoned hands them to the next) and appended to ``messages`` once the
        answer is complete.

        Returns:
            The complete answer (the step still open), or ``None`` when cancelled.

        Raises:
            _Fatal: a 4xx, an answer that is not a stream, or retries used up.
        """
        cuts = 0
        while True:
            ctx.start_step()
            taken = _user_messages(ctx)  # sent to the running turn: the model reads them now
            try:
                answer = self._call(ctx, messages + taken)
                if answer is not None:
                    messages += taken
                return answer
            except _Cut as exc:
                if ctx.cancelled.is_set():
                    return None
                cuts += 1
                ctx.reset_step(f"model stream cut: {exc}")
                if cuts > self.max_retries:
                    raise _Fatal(f"the model stream was cut {cuts} times; last: {exc}") from None
                if ctx.cancelled.wait(min(self.backoff_max, self.backoff_initial * 2 ** (cuts - 1))):
                    return None

    def _request(self, messages: List[Any]) -> Dict[str, Any]:
        body: Dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "system", "content": self.system}] + messages,
            "tools": TOOL_SPECS,
            "stream": True,
        }
        if self.include_usage:
            body["stream_options"] = {"include_usage": True}
        if self.temperature is not None:
            body["temperature"] = self.temperature
        return body

    def _call(self, ctx: TurnContext, messages: List[Any]) -> Optional[_Answer]:
        """One model call, streamed into the open step (:func:`.openai_stream.read_answer`).
        Raises :class:`_Cut`, :class:`_Fatal`."""
        body = self._request(messages)
        body["tools"] = body["tools"] + function_specs(ctx)  # the session's host tools
        response = self._endpoint.open(ctx, body, self._key(ctx))
        if response is None:
            return None
        return read_answer(ctx, response)

    # Kept as the driver's: a chunk's deltas into the step (tests call it).
    _apply = staticmethod(apply_chunk)


def _denied(ctx: TurnContext, call_id: str, name: str, args: Any) -> Optional[str]:
    """With approvals on, ask before the tool runs: ``None`` when allowed, else the tool
    result the model gets (the denial, with the user's message)."""
    if not ctx.approvals:
        return None
    decision = ctx.ask_approval(call_id, name, args, title=approval_title(name, args))
    if decision.allowed:
        return None
    why = {"timeout": " (no answer in time)", "cancel": " (the turn was cancelled)"}.get(decision.by, "")
    text = f"The user denied this tool call{why}; it did not run."
    return f"{text} The user says: {decision.message}" if decision.message else text


def _user_messages(ctx: TurnContext) -> List[Dict[str, Any]]:
    """The messages the user sent to the running turn, as user messages of the conversation."""
    return [{"role": "user", "content": m.text} for m in ctx.take_messages() if m.text]


def _add_usage(total: Dict[str, int], usage: Any) -> None:
    if isinstance(usage, dict):
        for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
            value = usage.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                total[key] = total.get(key, 0) + value


def make_driver(options: Any) -> OpenAIChatDriver:
    """Make the openai driver from its options (see the module docstring).

    Raises:
        ValueError: an option is unknown, missing (``model``) or of the wrong type, or an API
            key was put in the options.
    """
    opts = check_agent_options("openai", options)  # the same check bridge_options() makes
    return OpenAIChatDriver(opts)

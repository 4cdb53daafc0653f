"""The ``acp`` driver: any agent that speaks the Agent Client Protocol (ACP) on its stdio runs
behind a bridge. See the *ACP driver* page (:doc:`drivers/acp`).

Where the protocol comes from: the ACP specification and JSON schema, protocol version 1
(``zed-industries/agent-client-protocol``: initialization, session setup, the prompt turn, the
file system): JSON-RPC 2.0, one message per line, over the agent's stdin and stdout.

The driver is the ACP *client*. For each bridge session it starts the agent (``command`` and
``args``, in the workspace, with the session's environment over the bridge's), sends
``initialize`` (protocol version 1; client capabilities: ``fs.readTextFile`` and
``fs.writeTextFile`` when the ``fs`` option is on, no terminal), and keeps the process for the
session's next turns. A turn:

- opens the ACP session: the one the process already has; else the one the session state
  names (``{"acp_session_id": ...}``) with ``session/load`` when the agent advertises
  ``loadSession`` (its replayed history is not shown again: neither what it sends before
  its answer nor what it sends after, until it is silent for ``REPLAY_QUIET`` seconds, as
  the Gemini CLI replays after answering); else a new one with
  ``session/new``, whose id goes into the session state;
- sends ``session/prompt`` with the prompt as one text block, and maps every
  ``session/update`` onto parts until the answer (:mod:`bridge_client.drivers.acp_parts`);
- ends with the answer's ``stopReason``: ``end_turn`` and ``max_tokens`` → ``stop``,
  ``max_turn_requests`` → ``max-steps``, ``cancelled`` → ``cancelled``, ``refusal`` →
  ``error``; an error answer → ``error`` with the agent's message; an agent that exits first →
  ``error`` with its exit status and the tail of its stderr.

The agent's requests are answered in the turn's thread: ``session/request_permission`` by
the ``permission`` option (``reject`` by default: the option of kind ``reject_once`` is
chosen; ``allow`` picks ``allow_once``, ``allow_always`` picks ``allow_always``; the request
and the answer are a ``data`` part ``acp-permission``), ``fs/read_text_file`` and
``fs/write_text_file`` on the sandbox's files (relative paths from the workspace; a write goes
to a temporary file renamed into place), anything else ``Method not found``.

With approvals on (the session's ``approvals``; see the *Interactive turns* guide,
:doc:`interactive`), ``session/request_permission`` is asked of the host instead of the
policy: the choices are the options' kinds in the agent's order (``allow_once`` →
``allow-once``, ``allow_always`` → ``allow-always``, ``reject_once`` and ``reject_always`` →
``deny``), the tool name is the call's ``kind``, the title its ``title``; the answer selects
the option of the chosen kind (a denial ``reject_once``, else ``reject_always``), and a
cancel of the turn answers ``cancelled``. Messages the host sends to a running turn: ACP
takes no second ``session/prompt`` while one runs, so they are sent as the next prompt of the
same ACP session once the agent answers the running one with ``end_turn``, within the same
turn (each such prompt starts a new step); a turn that ends otherwise leaves them unsent.

Host tools (the session's ``tools``): the MCP server named ``host`` goes into the
``mcpServers`` of ``session/new`` and ``session/load`` (ACP's stdio form), its relay lives as
long as the agent process, and a permission the agent asks for a call of a host tool not
marked ``approve=True`` is allowed (:mod:`bridge_client.drivers.acp_host`).

Cancel sends ``session/cancel`` and answers a pending permission request ``cancelled``; an
agent that has not answered the prompt ``interrupt_grace`` seconds later is killed (its
process group), and the next turn starts it again.

What survives a restart: the session state holds the ACP session id. A bridge that restarted
starts the agent again and loads that session (``session/load``) when the agent can; a turn
cut by the restart is continued there with ``continue_prompt`` when it had completed steps,
and runs its prompt again when it had none. An agent without ``loadSession`` starts a new
ACP session (a ``data`` part ``acp-session-lost`` says so). Tool calls the cut step completed
are given back, not run again (:mod:`bridge_client.drivers.acp_journal`). The agents run in
process groups of their own, listed with a keeper process (as every CLI of
:mod:`bridge_client.drivers.cli_process`; :mod:`bridge_client.drivers.keeper`): a SIGKILLed
bridge leaves none running. An agent unused ``agent_idle_timeout`` seconds is stopped.

Options (``agent_options``, a JSON object):
    command: the agent program (required), looked up on ``PATH``.
    args: a list of its arguments (default none).
    permission: ``reject`` (default), ``allow`` or ``allow_always``.
    fs: serve the client file methods (default true).
    continue_prompt: the prompt that continues a turn cut by a restart.
    interrupt_grace: seconds >= 0 between ``session/cancel`` and killing the agent (default 5).
    start_timeout: seconds > 0 that ``initialize``, ``authenticate``, ``session/new`` and
        ``session/load`` may take each (default 60).
    auth_method: the id of an ``authMethods`` entry to ``authenticate`` with after
        ``initialize`` (default none: agents that read their key from the environment need
        none).
    mcp_servers: a list of MCP server objects passed to ``session/new``/``load`` (default []).
    max_agents: agent processes kept at once, one per session (default 8); the least
        recently used idle one is stopped to start another.
    agent_idle_timeout: seconds > 0 an agent process may stay unused before it is stopped
        (default 600), or null: kept until the session closes or the bridge exits.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Dict, List, Optional

from ..bridge.driver import TurnContext, TurnResult
from ..wire.parts import ToolCall
from ..driver_options import check_agent_options
from .acp_parts import UpdateMapper, ask_permission, policy_permission, prompt_end, stop_reason
from .acp_parts import taken_messages
from .acp_fs import serve_fs
from .acp_journal import ToolJournal, completed_calls, recap
from .acp_stop import POLITE_GRACE, stop_agent
from . import acp_host
from .acp_rpc import AUTH_REQUIRED, METHOD_NOT_FOUND, AgentExited, RpcError
from .acp_slot import AgentProcess, Slot, reap_idle, stop_least_used
from .idle_reaper import DEFAULT_IDLE_TIMEOUT, IdleReaper
from .cli_process import CLIStartError, JsonLinesProcess, summarize
from .workspace import workspace_dir

__all__ = ["AcpDriver", "make_driver", "DEFAULT_CONTINUE_PROMPT", "PROTOCOL_VERSION"]

PROTOCOL_VERSION = 1
"""The ACP protocol version this driver speaks."""

DEFAULT_CONTINUE_PROMPT = (
    "Your previous run was interrupted (the process running you restarted). "
    "Continue the task where you left off."
)
"""What a turn continued after a restart sends to the loaded ACP session."""

REPLAY_QUIET = 0.5
"""Seconds of silence after ``session/load``'s answer that end the replayed history."""

log = logging.getLogger("bridge_client.drivers.acp")


class _Failed(Exception):
    """The turn cannot go on: it ends with ``error`` and this message."""


class _GaveUp(Exception):
    """The agent did not answer a cancel within the grace period."""


class AcpDriver:
    """The ACP client driver (``agent_id`` ``"acp"``); see the module docstring.

    Args:
        options: the checked options (see :func:`make_driver`).
    """

    agent_id = "acp"
    supports_approvals = True
    supports_messages = True
    supports_host_tools = True  # the MCP server named host in session/new's mcpServers (acp_host)
    preset_env: Dict[str, str] = {}  # a named agent's variables (drivers.acp_preset), under the session's

    def __init__(self, options: Dict[str, Any]) -> None:
        self.argv: List[str] = [options["command"], *options.get("args", [])]
        self.permission: str = options.get("permission", "reject")
        self.fs: bool = options.get("fs", True)
        self.continue_prompt: str = options.get("continue_prompt", DEFAULT_CONTINUE_PROMPT)
        self.interrupt_grace = float(options.get("interrupt_grace", 5.0))
        self.start_timeout = float(options.get("start_timeout", 60.0))
        self.auth_method: Optional[str] = options.get("auth_method")
        self.mcp_servers: List[Any] = list(options.get("mcp_servers") or [])
        self.max_agents: int = options.get("max_agents", 8)
        timeout = options.get("agent_idle_timeout", DEFAULT_IDLE_TIMEOUT)
        reap = lambda now: reap_idle(self._running_slots(), timeout, self._stop, now)  # noqa: E731
        self.reaper = IdleReaper(timeout, reap)
        self._lock = threading.Lock()
        self._slots: Dict[str, Slot] = {}
        self._closed = False

    def initial_state(self) -> Any:
        """A new session's data: ``{"acp_session_id": null}`` (no ACP session yet)."""
        return {"acp_session_id": None}

    # ------------------------------------------------------------------ a turn

    def run_turn(self, ctx: TurnContext) -> TurnResult:
        """Run one prompt of the session's ACP session (see the module docstring)."""
        with self._lock:
            slot = self._slots.setdefault(ctx.session_id, Slot())
        while not slot.lock.acquire(timeout=0.1):  # another turn of this session runs
            if ctx.cancelled.is_set():
                return TurnResult("cancelled")
        try:
            return self._run(ctx, slot)
        finally:
            if slot.agent is not None:
                slot.agent.last_used = time.monotonic()
            if slot.closed:
                self._stop(slot)
            slot.lock.release()

    def _run(self, ctx: TurnContext, slot: Slot) -> TurnResult:
        journal = ToolJournal.for_session(ctx.session_id, ctx.turn_id)
        mapper = UpdateMapper(ctx, journal)
        logged = [p.tool_call_id for step in ctx.steps for p in step if isinstance(p, ToolCall)]
        done, interrupted = journal.cut(logged)
        try:
            agent = self._agent(ctx, slot)
            if agent.relay is not None:  # a host tool's call opens the step, if none is open
                agent.relay.bind(ctx, mapper.ensure_step)
            loaded = self._open_session(ctx, agent)
            prompt = self.continue_prompt if ctx.completed_steps or done else ctx.prompt
            if done or interrupted:  # a restart cut a step with tool calls: give them back
                prompt = mapper.given_back(ctx.prompt if not loaded else prompt, done, interrupted)
            told = completed_calls(ctx.steps) if loaded and ctx.completed_steps else []
            prompt = f"{prompt}\n\n{recap(told, [])}" if told else prompt
            result = self._prompt(ctx, agent, mapper, prompt)
            # ACP takes no prompt while one runs: the user's messages sent meanwhile are the
            # next prompt of the same turn, once the agent ended this one.
            while stop_reason(result) == "end_turn" and not ctx.cancelled.is_set():
                later = taken_messages(ctx)
                if not later:
                    break
                mapper.close("stop")
                result = self._prompt(ctx, agent, mapper, "\n\n".join(later))
        except _GaveUp:
            self._stop(slot, polite=0.0)  # it ignored the cancel: no polite wait
            mapper.close("cancelled", "cancelled")
            return TurnResult("cancelled")
        except _Failed as exc:
            mapper.close("error")
            return TurnResult("error", None, str(exc))
        except AgentExited:
            agent_failed = self._exit_message(slot)
            mapper.close("error")
            return TurnResult("error", None, agent_failed)
        except RpcError as exc:
            mapper.close("error")
            if ctx.cancelled.is_set():
                return TurnResult("cancelled")
            return TurnResult("error", None, f"the ACP agent answered session/prompt with an error: {exc}")
        turn_reason, step_reason, usage, error = prompt_end(result)
        mapper.close(step_reason)
        return TurnResult(turn_reason, usage, error)

    # ------------------------------------------------------------------ the agent process

    def _agent(self, ctx: TurnContext, slot: Slot) -> AgentProcess:
        """The session's agent process: the running one, or a new one (initialized) when it
        is gone or the session's environment changed."""
        env = {**self.preset_env, **ctx.env}
        agent = slot.agent
        if agent is not None and agent.alive and agent.env == env:
            running = agent
            if running.conn.drain(lambda m: self._between_turns(running, m)):
                if running.relay is not None:
                    running.relay.bind(ctx)  # its MCP server serves this turn's host tools
                return running
        if agent is not None:
            if agent.alive and agent.env != env:
                log.info("session %s: its environment changed, starting its ACP agent again", ctx.session_id)
            self._stop(slot)
        self._make_room()
        relay = acp_host.open_relay(ctx)  # the host tools' relay, for the agent's life
        try:
            proc = JsonLinesProcess(self.agent_command(relay), workspace_dir(), keep_stdin=True, env=env)
        except BaseException as exc:
            if relay is not None:
                relay.close()
            if isinstance(exc, CLIStartError):
                raise _Failed(f"cannot start the ACP agent: {exc}") from None
            raise
        agent = slot.agent = AgentProcess(proc, env, relay)
        self.reaper.start()
        try:
            self._initialize(ctx, agent)
        except BaseException:
            self._stop(slot)
            raise
        return agent

    def _initialize(self, ctx: TurnContext, agent: AgentProcess) -> None:
        params = {
            "protocolVersion": PROTOCOL_VERSION,
            "clientCapabilities": {
                "fs": {"readTextFile": self.fs, "writeTextFile": self.fs},
                "terminal": False,
            },
        }
        result = self._start_call(ctx, agent, "initialize", params)
        if not isinstance(result, dict):
            raise _Failed(f"the ACP agent answered initialize with {summarize(result)}")
        version = result.get("protocolVersion")
        if version != PROTOCOL_VERSION:
            raise _Failed(
                f"the ACP agent speaks protocol version {version!r}; this driver speaks {PROTOCOL_VERSION}"
            )
        caps = result.get("agentCapabilities")
        agent.capabilities = caps if isinstance(caps, dict) else {}
        refused = acp_host.check_stdio(agent.capabilities) if agent.relay is not None else None
        if refused:
            raise _Failed(refused)
        methods = result.get("authMethods")
        agent.auth_methods = methods if isinstance(methods, list) else []
        if self.auth_method is not None:
            self._start_call(ctx, agent, "authenticate", {"methodId": self.auth_method})

    def _start_call(self, ctx: TurnContext, agent: AgentProcess, method: str, params: Any) -> Any:
        """A set-up request (bounded by ``start_timeout``); failures become :class:`_Failed`."""

        def poll() -> None:
            if ctx.cancelled.is_set():
                raise _GaveUp()

        try:
            return agent.conn.request(
                method,
                params,
                lambda m: self._between_turns(agent, m),
                timeout=self.start_timeout,
                poll=poll,
            )
        except RpcError as exc:
            hint = ""
            if exc.code == AUTH_REQUIRED:
                ids = [m.get("id") for m in agent.auth_methods if isinstance(m, dict)]
                hint = (
                    f"; the agent wants authentication (its methods: {', '.join(map(str, ids)) or 'none'}):"
                    " give it its credentials in the session's environment, or set the auth_method option"
                )
            raise _Failed(f"the ACP agent refused {method}: {exc}{hint}") from None
        except TimeoutError as exc:
            raise _Failed(str(exc)) from None

    def _open_session(self, ctx: TurnContext, agent: AgentProcess) -> bool:
        """Open the turn's ACP session; True when it is the session's earlier one."""
        data = ctx.state.data if isinstance(ctx.state.data, dict) else {}
        wanted = data.get("acp_session_id")
        wanted = wanted if isinstance(wanted, str) and wanted else None
        if agent.session_id is not None and agent.session_id == wanted:
            return True
        cwd, servers = workspace_dir(), self.mcp_servers + self.session_mcp_servers(agent.relay)
        if wanted is not None:
            if agent.capabilities.get("loadSession") is True:
                try:
                    # The agent replays the conversation as updates: _between_turns drops them.
                    params = {"sessionId": wanted, "cwd": cwd, "mcpServers": servers}
                    self._start_call(ctx, agent, "session/load", params)
                    agent.session_id = wanted
                    self._drop_replay(ctx, agent)
                    return True
                except _Failed as exc:
                    lost = str(exc)
            else:
                lost = "the agent cannot load sessions (no loadSession capability)"
            ctx.data("acp-session-lost", {"sessionId": wanted, "reason": lost})
        result = self._start_call(ctx, agent, "session/new", {"cwd": cwd, "mcpServers": servers})
        session_id = result.get("sessionId") if isinstance(result, dict) else None
        if not isinstance(session_id, str) or not session_id:
            raise _Failed(f"the ACP agent answered session/new without a sessionId: {summarize(result)}")
        agent.session_id = session_id
        ctx.set_state({**data, "acp_session_id": session_id})
        return False

    def _drop_replay(self, ctx: TurnContext, agent: AgentProcess) -> None:
        """Read (and drop) the history an agent replays after it answered ``session/load``
        (the Gemini CLI does), until it is silent for ``REPLAY_QUIET`` seconds."""

        def poll() -> None:
            if ctx.cancelled.is_set():
                raise _GaveUp()

        drop = lambda m: self._between_turns(agent, m)  # noqa: E731
        if not agent.conn.settle(drop, REPLAY_QUIET, self.start_timeout, poll):
            raise AgentExited("the agent exited after session/load")

    def _prompt(self, ctx: TurnContext, agent: AgentProcess, mapper: UpdateMapper, prompt: str) -> Any:
        session_id = agent.session_id
        sent_cancel: List[float] = []

        def poll() -> None:
            if not ctx.cancelled.is_set():
                return
            if not sent_cancel:
                sent_cancel.append(time.monotonic())
                try:
                    agent.conn.notify("session/cancel", {"sessionId": session_id})
                except AgentExited:
                    raise _GaveUp() from None
            elif time.monotonic() - sent_cancel[0] >= self.interrupt_grace:
                raise _GaveUp()

        def handle(message: Dict[str, Any]) -> None:
            params = message.get("params")
            params = params if isinstance(params, dict) else {}
            if "id" in message:
                self._answer(ctx, agent, mapper, message, params)
            elif message["method"] == "session/update" and params.get("sessionId") == session_id:
                mapper.update(params.get("update"))

        params = {"sessionId": session_id, "prompt": [{"type": "text", "text": prompt}]}
        return agent.conn.request("session/prompt", params, handle, poll=poll)

    # ------------------------------------------------------------------ the agent's requests

    def _between_turns(self, agent: AgentProcess, message: Dict[str, Any]) -> None:
        """A message outside a prompt: notifications (a replayed history, command lists) are
        dropped; a request is refused, a permission request answered ``cancelled``."""
        if "id" not in message:
            return
        if message["method"] == "session/request_permission":
            agent.conn.respond(message["id"], {"outcome": {"outcome": "cancelled"}})
        else:
            method = message["method"]
            agent.conn.respond_error(message["id"], METHOD_NOT_FOUND, f"no turn is running: {method}")

    def _answer(
        self,
        ctx: TurnContext,
        agent: AgentProcess,
        mapper: UpdateMapper,
        message: Dict[str, Any],
        params: Dict[str, Any],
    ) -> None:
        method, request_id = message["method"], message["id"]
        if method == "session/request_permission":
            agent.conn.respond(request_id, {"outcome": self._permission(ctx, mapper, params)})
        elif method in ("fs/read_text_file", "fs/write_text_file") and self.fs:
            try:
                agent.conn.respond(request_id, serve_fs(method, params))
            except RpcError as exc:
                agent.conn.respond_error(request_id, exc.code, exc.message)
        else:
            agent.conn.respond_error(request_id, METHOD_NOT_FOUND, f"Method not found: {method}")

    def _permission(self, ctx: TurnContext, mapper: UpdateMapper, params: Dict[str, Any]) -> Dict[str, Any]:
        """With approvals on, ask the host; else the ``permission`` policy chooses."""
        call = params.get("toolCall")
        known = mapper.tools.get(str(call.get("toolCallId"))) if isinstance(call, dict) else None
        announced = known.fields.get("title") if known is not None else None  # before the ask's
        tool = mapper.asked(call)
        options = [o for o in params.get("options") or [] if isinstance(o, dict)]
        raw = call.get("rawInput") if isinstance(call, dict) else None
        if tool is not None and acp_host.host_tool_asked(ctx, tool.fields.get("title"), raw, announced):
            return policy_permission(ctx, tool, options, "allow")  # a host tool: runs unasked
        if ctx.approvals:
            return ask_permission(ctx, mapper, tool, options)
        return policy_permission(ctx, tool, options, self.permission)

    # ------------------------------------------------------------------ ending agents

    def _exit_message(self, slot: Slot) -> str:
        agent = slot.agent
        if agent is None:
            return "the ACP agent is gone"
        code = agent.proc.wait(2.0)
        tail = agent.proc.stderr_tail()
        self._stop(slot)
        status = f"status {code}" if code is not None else "still running"
        return f"the ACP agent exited ({status}) before the turn ended" + (f": {tail}" if tail else "")

    def agent_command(self, relay: Optional[acp_host.AgentRelay]) -> List[str]:
        """The agent's command line, naming the ``host`` server where the agent takes it so
        (default: ``argv`` as it is; the server goes in ``session/new``)."""
        return self.argv

    def session_mcp_servers(self, relay: Optional[acp_host.AgentRelay]) -> List[Dict[str, Any]]:
        """The ``host`` MCP server for ``session/new`` and ``session/load``."""
        return acp_host.mcp_servers(relay)

    def _stop(self, slot: Slot, polite: float = POLITE_GRACE) -> None:
        """End the slot's agent and its process group (see :func:`stop_agent`)."""
        agent, slot.agent = slot.agent, None
        if agent is None:
            return
        stop_agent(agent.proc, polite)
        if agent.relay is not None:
            agent.relay.close()

    def _running_slots(self) -> List[Slot]:
        with self._lock:
            return [s for s in self._slots.values() if s.agent is not None]

    def _make_room(self) -> None:
        """Stop the least recently used idle agents while ``max_agents`` are running."""
        stop_least_used(self._running_slots(), self.max_agents - 1, self._stop)

    def session_closed(self, session_id: str) -> None:
        """Stop the session's agent process (now, or when its running turn ends). A later
        turn of the session starts an agent again and loads its ACP session when the agent
        can (``session/load``)."""
        ToolJournal.for_session(session_id, "").discard()
        with self._lock:
            slot = self._slots.pop(session_id, None)
        if slot is None:
            return
        slot.closed = True
        if slot.lock.acquire(blocking=False):
            try:
                self._stop(slot)
            finally:
                slot.lock.release()

    def close(self) -> None:
        """Stop every agent process (the bridge is shutting down)."""
        self.reaper.close()
        with self._lock:
            self._closed = True
            slots = list(self._slots.values())
        for slot in slots:
            self._stop(slot)


def make_driver(options: Any) -> AcpDriver:
    """Make the ACP driver from its options (see the module's docstring).

    Raises:
        ValueError: ``command`` is missing, or an option is unknown or of the wrong type.
    """
    return AcpDriver(check_agent_options("acp", options))

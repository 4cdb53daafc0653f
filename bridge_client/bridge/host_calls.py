"""Host tool calls inside the bridge: a driver's call of a host tool, the host's claim and
result, each a part of the turn's log, committed before anything acts on it.

One :class:`HostCalls` per turn, kept with the turn's
:class:`~bridge_client.bridge.approvals.TurnInteraction` (it shares that object's lock and
its way of appending) and rebuilt from the log when the turn is read back from the store.

- A driver calls :func:`call_host_tool`: the bridge appends ``host-tool-call`` (a new call
  id) and blocks until a ``host-tool-result`` for it is committed: the host's, or the
  bridge's own error result (``by="timeout"`` after the session's tool timeout, ``by="cancel"``).
- Exactly once: unlike an approval request, a call does not expire when its step's attempt is
  abandoned (a bridge restart). The next attempt's call of the same tool with the same
  arguments, at the same place in the step (its sequence number), *is* that call: it gets the
  stored result, or waits for the result the host is still sending. The function is never
  called for it again.
- A host claims a call before it runs the function (``ClaimHostTool``; a ``host-tool-start``
  part names the host), and claims it again every ``LEASE / 4`` seconds while the function
  runs: its lease. Another host's claim while the lease holds is answered ``running`` (two
  readers of one turn: the other one answers). A claim by another host once the lease ran out
  (no renewal for :data:`LEASE` seconds; a claim read back from the log after a restart starts
  a new lease) means the first host was lost while the function ran: with ``retry`` the new
  host runs it again; without, the bridge records an error result (``by="host-lost"``).
"""
from __future__ import annotations

import json
import threading
import time
import uuid
import weakref
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..errors import HostToolCallNotFound
from .approvals import Append, TurnInteraction
from .store import StoredPart, Ticket

__all__ = ["HostCalls", "calls_of", "call_host_tool", "host_tools", "configure", "HOST_TOOL_TYPES", "LEASE"]

LEASE = 5.0
"""Seconds a host's claim of a call holds without a renewal (the host renews it while its
function runs); after that another host may take the call over."""

HOST_TOOL_TYPES = frozenset(("host-tool-call", "host-tool-start", "host-tool-result"))

_PENDING, _ANSWERED, _EXPIRED = "pending", "answered", "expired"

LOST_TEXT = (
    "the host was lost while the tool {name} ran: it may or may not have completed; "
    "it was not run again"
)
TIMEOUT_TEXT = "the host did not answer the call of tool {name} within {seconds:g} seconds"
CANCEL_TEXT = "the turn was cancelled before the host answered the call of tool {name}"
ABANDONED_TEXT = "the call of tool {name} was abandoned"


class _Call:
    __slots__ = (
        "id", "step", "attempt", "seq", "tool_name", "text", "status", "result", "host_id", "ticket", "lease"
    )

    def __init__(self, call_id: str, step: int, attempt: int, seq: int, tool_name: str, text: str) -> None:
        self.id = call_id
        self.step, self.attempt, self.seq = step, attempt, seq
        self.tool_name = tool_name
        self.text = text  # the arguments as canonical JSON, to match a rerun's call
        self.status = _PENDING
        self.result: Optional[Dict[str, Any]] = None
        self.host_id: Optional[str] = None  # the host that started it, if any
        self.ticket: Optional[Ticket] = None  # the result part's, until committed
        self.lease = 0.0  # monotonic time until which host_id's claim holds


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class HostCalls:
    """The host tool calls of one turn (see the module docstring).

    Args:
        interaction: the turn's :class:`TurnInteraction` (its lock, its append, its commit
            wait, its cancel event).
    """

    def __init__(self, interaction: TurnInteraction) -> None:
        self._ia = interaction
        self._cond = interaction._cond
        self._calls: Dict[str, _Call] = {}
        self._order: List[_Call] = []
        self._seq: Dict[Tuple[int, int], int] = {}
        self._nonce = uuid.uuid4().hex[:8]
        self.tools: Dict[str, Dict[str, Any]] = {}
        self.timeout = 600.0

    def configure(self, tools: Sequence[Dict[str, Any]], timeout: Optional[float]) -> None:
        """The session's host tools (``OpenSession``'s specs) and tool timeout, for a run."""
        with self._cond:
            self.tools = {t["name"]: dict(t) for t in tools}
            self.timeout = 600.0 if timeout is None else float(timeout)

    def load(self, parts: Sequence[StoredPart]) -> None:
        """Rebuild from the turn's committed log. Calls of abandoned attempts stay pending
        (a continuing run or host finishes them); a finished turn's pending calls expire."""
        counts: Dict[Tuple[int, int], int] = {}
        with self._cond:
            for p in parts:
                if p.type == "turn-finish":
                    for rec in self._order:
                        if rec.status == _PENDING:
                            rec.status = _EXPIRED
                if p.type not in HOST_TOOL_TYPES:
                    continue
                value = json.loads(p.text)
                call_id = str(value.get("callId"))
                if p.type == "host-tool-call" and p.step is not None:
                    key = (p.step, p.attempt)
                    counts[key] = counts.get(key, 0) + 1
                    rec = _Call(
                        call_id, p.step, p.attempt, counts[key], str(value.get("toolName")),
                        _canonical(value.get("input")),
                    )
                    self._calls[call_id] = rec
                    self._order.append(rec)
                elif call_id in self._calls:
                    rec = self._calls[call_id]
                    if p.type == "host-tool-start":
                        rec.host_id = str(value.get("hostId"))
                        rec.lease = time.monotonic() + LEASE  # that host may be alive: a new lease
                    else:
                        rec.status, rec.result = _ANSWERED, _result_fields(value)

    # ------------------------------------------------------------------ the driver's side

    def call(
        self, step: int, attempt: int, tool_call_id: str, tool_name: str, input: Any
    ) -> Tuple[Any, bool]:
        """Call a host tool and wait for its result: ``(output, is_error)``. See the module
        docstring. Raises TypeError for arguments JSON cannot carry, RuntimeError outside a run."""
        text = _canonical(input)
        with self._cond:
            append = self._ia._append
            if append is None:
                raise RuntimeError("call_host_tool() outside the turn's run")
            key = (step, attempt)
            seq = self._seq[key] = self._seq.get(key, 0) + 1
            rec = self._rerun_of(step, attempt, seq, tool_name, text)
            if rec is None:
                rec = _Call(f"{step}.{seq}.{attempt}-{self._nonce}", step, attempt, seq, tool_name, text)
                fields = {"callId": rec.id, "toolCallId": tool_call_id, "toolName": tool_name, "input": input}
                append("host-tool-call", step, attempt, fields, ())
                self._calls[rec.id] = rec
                self._order.append(rec)
            deadline = time.monotonic() + self.timeout
        while True:
            with self._cond:
                ticket = None
                while ticket is None:
                    if rec.status == _ANSWERED and rec.ticket is None:
                        assert rec.result is not None
                        return rec.result["output"], bool(rec.result["isError"])
                    if rec.status == _ANSWERED:
                        ticket = rec.ticket  # another thread commits it: wait for it too
                        break
                    if rec.status == _EXPIRED:
                        return ABANDONED_TEXT.format(name=tool_name), True
                    cancelled = self._ia._cancelled
                    if cancelled is not None and cancelled.is_set():
                        ticket = self._record(rec, CANCEL_TEXT.format(name=tool_name), True, "cancel", append)
                        break
                    wait = deadline - time.monotonic()
                    if wait <= 0:
                        text_out = TIMEOUT_TEXT.format(name=tool_name, seconds=self.timeout)
                        ticket = self._record(rec, text_out, True, "timeout", append)
                        break
                    self._cond.wait(wait)
            self._commit(rec, ticket)

    def _rerun_of(self, step: int, attempt: int, seq: int, name: str, text: str) -> Optional[_Call]:
        """The call an earlier attempt of the step made at this place with the same tool and
        arguments (not expired), or None; other calls at this place of earlier attempts
        expire (the rerun went another way). ``_cond`` held."""
        found = None
        for rec in self._order:
            if rec.step == step and rec.seq == seq and rec.attempt != attempt and rec.status != _EXPIRED:
                if rec.tool_name == name and rec.text == text:
                    found = rec
                elif rec.status == _PENDING:
                    rec.status = _EXPIRED
        return found

    def _record(self, rec: _Call, output: Any, is_error: bool, by: str, append: Append) -> Ticket:
        fields = {"callId": rec.id, "toolName": rec.tool_name, "output": output, "isError": is_error}
        fields["by"] = by
        _, ticket = append("host-tool-result", None, 1, dict(fields), ())
        rec.status, rec.result, rec.ticket = _ANSWERED, fields, ticket
        self._cond.notify_all()
        return ticket

    def _commit(self, rec: _Call, ticket: Optional[Ticket]) -> None:
        if ticket is not None:
            self._ia._wait_commit(ticket)
        with self._cond:
            if rec.ticket is ticket:
                rec.ticket = None
            self._cond.notify_all()

    # ------------------------------------------------------------------ the RPCs

    def _find(self, call_id: str) -> _Call:
        rec = self._calls.get(call_id)
        if rec is None:
            raise HostToolCallNotFound(
                f"turn {self._ia.turn_id!r} has no host tool call {call_id!r}",
                turnId=self._ia.turn_id,
                callId=call_id,
            )
        if rec.status == _PENDING and self._ia._finished:
            rec.status = _EXPIRED
        return rec

    def claim(self, call_id: str, host_id: str, retry: bool, append: Append) -> Dict[str, Any]:
        """``ClaimHostTool``: may ``host_id`` run the call's function now?

        Returns:
            ``{"callId", "status", "lease"}``: ``run`` (run it, claim it again within
            ``lease`` seconds while it runs, then ``AnswerHostTool``), ``running`` (another
            host's lease holds: ask again later), ``answered`` (with ``result``: do not run
            it), or ``expired`` (nobody waits for it any more).

        Raises:
            HostToolCallNotFound: no such call.
        """
        ticket: Optional[Ticket] = None
        with self._cond:
            rec = self._find(call_id)
            if rec.status == _EXPIRED:
                return {"callId": call_id, "status": "expired"}
            now = time.monotonic()
            other = rec.host_id not in (None, host_id)
            if rec.status == _PENDING and other and rec.lease > now:
                return {"callId": call_id, "status": "running", "lease": LEASE}
            if rec.status == _PENDING and other and not retry:
                ticket = self._record(rec, LOST_TEXT.format(name=rec.tool_name), True, "host-lost", append)
            elif rec.status == _PENDING and rec.host_id != host_id:
                _, ticket = append("host-tool-start", None, 1, {"callId": call_id, "hostId": host_id}, ())
                rec.host_id, rec.lease = host_id, now + LEASE
            elif rec.status == _PENDING:
                rec.lease = now + LEASE  # the same host again: a renewal
        if ticket is not None:
            self._ia._wait_commit(ticket)
            with self._cond:
                if rec.ticket is ticket:
                    rec.ticket = None
                self._cond.notify_all()
        with self._cond:
            if rec.status == _ANSWERED:
                return {"callId": call_id, "status": "answered", "result": dict(rec.result or {})}
            return {"callId": call_id, "status": "run", "lease": LEASE}

    def answer(self, call_id: str, output: Any, is_error: bool, append: Append) -> Dict[str, Any]:
        """``AnswerHostTool``: record the host's result (once per call id).

        Returns:
            The recorded result ``{"callId", "toolName", "output", "isError", "by"}`` with
            ``status``: ``recorded`` (this answer, or the same host's before: the answer is
            idempotent) or ``expired`` (nobody waits for it any more); the first result
            stands, whoever gave it.

        Raises:
            HostToolCallNotFound: no such call.
        """
        with self._cond:
            rec = self._find(call_id)
            if rec.status == _EXPIRED:
                return {"callId": call_id, "status": "expired"}
            ticket = rec.ticket
            if rec.status == _PENDING:
                ticket = self._record(rec, output, is_error, "host", append)
        self._commit(rec, ticket)
        with self._cond:
            return {**dict(rec.result or {}), "status": "recorded"}


def _result_fields(value: Dict[str, Any]) -> Dict[str, Any]:
    return {k: value.get(k) for k in ("callId", "toolName", "output", "isError", "by")}


_REGISTRY: "weakref.WeakKeyDictionary[TurnInteraction, HostCalls]" = weakref.WeakKeyDictionary()
_REGISTRY_LOCK = threading.Lock()


def calls_of(interaction: TurnInteraction) -> HostCalls:
    """The turn's :class:`HostCalls` (made on first use)."""
    with _REGISTRY_LOCK:
        calls = _REGISTRY.get(interaction)
        if calls is None:
            calls = _REGISTRY[interaction] = HostCalls(interaction)
        return calls


def configure(interaction: TurnInteraction, session: Any) -> None:
    """Give a run the session's host tools (``session.host_tools``, ``session.tool_timeout``)."""
    tools, timeout = getattr(session, "host_tools", ()), getattr(session, "tool_timeout", None)
    calls_of(interaction).configure(tools, timeout)


def host_tools(ctx: Any) -> List[Dict[str, Any]]:
    """The session's host tools, for a driver: ``[{"name", "description", "inputSchema",
    "approve", "retryOnHostLoss"}]`` (empty when it has none)."""
    sink = getattr(ctx, "_interactive", None)
    if not isinstance(sink, TurnInteraction):
        return []
    calls = calls_of(sink)
    with calls._cond:
        return [dict(t) for t in calls.tools.values()]


def call_host_tool(ctx: Any, tool_call_id: str, tool_name: str, input: Any) -> Tuple[Any, bool]:
    """Call a host tool from a driver's step and block until its result is recorded.

    Args:
        ctx: the run's :class:`~bridge_client.bridge.context.TurnContext` (a step open).
        tool_call_id: the agent's id of the call. tool_name: one of :func:`host_tools`.
        input: the arguments (a JSON object).

    Returns:
        ``(output, is_error)``: the function's JSON value or text, or an error's text.

    Raises:
        RuntimeError: no step is open, or the turn is over. TypeError: ``input`` is not JSON.
    """
    with ctx._lock:
        open_step = ctx._in_step("call_host_tool")
    sink = ctx._interactive
    if not isinstance(sink, TurnInteraction):
        raise RuntimeError("call_host_tool() needs a turn run by the bridge")
    return calls_of(sink).call(open_step.step, open_step.attempt, tool_call_id, tool_name, input)

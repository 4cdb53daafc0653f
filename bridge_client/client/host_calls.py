"""The host's side of host tool calls: a turn's ``host-tool-call`` parts, run in the thread
that reads the turn.

:class:`~bridge_client.client.interactive.TurnApprovals` hands each call part it yields to
:class:`HostCallRunner` (when the next part is asked for, as for the ``approve=`` policy),
which claims the call (``ClaimHostTool``), runs the function (renewing its claim from a
thread of its own while it runs: the bridge's lease), and sends its result
(``AnswerHostTool``). A call another live host is running (its lease holds) is waited for:
its claim is asked again until that host answers, or its lease runs out. Both requests are
idempotent in the bridge (by call id, and host id), so they are resent over a new connection
after a drop or a bridge restart; the function runs at most once per call in this host, and a
result not yet sent is kept and sent again when the turn is read on. See the *Host tools*
guide (:doc:`host-tools`).
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any, Dict, List, Optional, Protocol, Set, Tuple

from ..errors import HostToolCallNotFound
from ..host_tools import HostTool
from ..wire import host_parts, rpcs
from ..wire.host_parts import HostToolCall, HostToolResult
from ..wire.parts import Part

__all__ = ["HostCallRunner"]

log = logging.getLogger("bridge_client")

_LEASE = 5.0  # the bridge's lease when it names none (seconds)
_POLL = 0.25  # seconds between claims of a call another live host runs


class Turn(Protocol):
    """What running calls needs of a :class:`~bridge_client.client.turn.Turn`."""

    id: str
    _session_id: str

    def _call(self, rpc: rpcs.Rpc, payload: Any) -> Any: ...

    def _unyielded(self) -> List[Part]: ...


class HostCallRunner:
    """Runs one turn's host tool calls in this host.

    Args:
        tools: the session's tools.

    Attributes:
        host_id: this reader's id in the bridge's ``host-tool-start`` parts (random, new for
            each turn object: a host that continues the turn elsewhere is another host).
    """

    def __init__(self, tools: Tuple[HostTool, ...]) -> None:
        self.tools: Dict[str, HostTool] = {t.name: t for t in tools}
        self.host_id = "host-" + uuid.uuid4().hex
        self.done: Set[str] = set()  # calls whose result part was yielded, or that need nothing more
        self._started: Set[str] = set()  # calls whose function this host started
        self._results: Dict[str, Tuple[Any, bool]] = {}  # results not yet recorded by the bridge

    def wants(self, part: Part) -> bool:
        """True for a call part this host has still to answer; accounts result parts."""
        if isinstance(part, HostToolResult):
            self.done.add(part.call_id)
            self._results.pop(part.call_id, None)
            return False
        return isinstance(part, HostToolCall) and part.call_id not in self.done

    def run(self, turn: Turn, call: HostToolCall) -> None:
        """Answer one call: claim it, run the function, send the result. A call already
        answered (its result among the parts received), expired, or taken by the bridge's own
        result is skipped.

        Raises:
            BridgeUnavailable, SessionReleased, ...: as any request; the call is then still
                this host's, and :meth:`run` for it again sends what is left to send.
        """
        cid = call.call_id
        if cid in self.done or _answered_ahead(turn, cid):
            return
        if cid not in self._results:
            if cid in self._started:
                return  # its function was interrupted here: never run twice in one host
            tool = self.tools.get(call.tool_name)
            status, lease = self._claim(turn, call, tool)
            while status == "running":  # another live host runs it: wait for its answer
                time.sleep(min(_POLL, lease / 4))
                status, lease = self._claim(turn, call, tool)
            if status != "run":
                self.done.add(cid)
                return
            self._started.add(cid)
            if tool is None:
                self._results[cid] = (f"this host has no tool named {call.tool_name!r}", True)
            else:
                stop = threading.Event()
                renew = threading.Thread(
                    target=self._renew, args=(turn, call, tool, lease / 4, stop),
                    name="host-tool-lease", daemon=True,
                )
                renew.start()
                try:
                    self._results[cid] = tool.run(call.input)
                finally:
                    stop.set()
                    renew.join()
        output, is_error = self._results[cid]
        payload = {
            "sessionId": turn._session_id, "turnId": turn.id, "callId": cid,
            "output": output, "isError": is_error,
        }
        try:
            recorded = turn._call(host_parts.ANSWER_HOST_TOOL, payload)
        except HostToolCallNotFound as exc:
            log.warning("turn %s: the result of host tool call %s was not used: %s", turn.id, cid, exc)
            recorded = {"status": "expired"}
        self._results.pop(cid, None)
        self.done.add(cid)
        if isinstance(recorded, dict) and recorded.get("by") not in (None, "host"):
            log.warning("turn %s: host tool call %s was answered %s before", turn.id, cid, recorded.get("by"))

    def _renew(
        self, turn: Turn, call: HostToolCall, tool: HostTool, every: float, stop: threading.Event
    ) -> None:
        """Claim the call again every ``every`` seconds until ``stop`` (the function returned):
        the bridge keeps this host's lease. A failure is logged; the next renewal tries again."""
        while not stop.wait(every):
            try:
                self._claim(turn, call, tool)
            except Exception as exc:
                log.debug("turn %s: renewing host tool call %s: %s", turn.id, call.call_id, exc)

    def _claim(self, turn: Turn, call: HostToolCall, tool: Optional[HostTool]) -> Tuple[str, float]:
        payload = {
            "sessionId": turn._session_id,
            "turnId": turn.id,
            "callId": call.call_id,
            "hostId": self.host_id,
            "retry": bool(tool is not None and tool.retry_on_host_loss),
        }
        try:
            value = turn._call(host_parts.CLAIM_HOST_TOOL, payload)
        except HostToolCallNotFound as exc:
            log.warning("turn %s: host tool call %s: %s", turn.id, call.call_id, exc)
            return "expired", _LEASE
        if not isinstance(value, dict):
            return "expired", _LEASE
        lease = value.get("lease")
        if isinstance(lease, bool) or not isinstance(lease, (int, float)) or not lease > 0:
            lease = _LEASE
        return str(value.get("status")), float(lease)


def _answered_ahead(turn: Turn, call_id: str) -> bool:
    """True when the parts received and not yet yielded hold the call's result (a turn read
    again from its start): it is not run again."""
    return any(isinstance(p, HostToolResult) and p.call_id == call_id for p in turn._unyielded())

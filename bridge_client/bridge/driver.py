"""What an agent implements to run inside the bridge: :class:`Driver`, and the
:class:`TurnContext` a turn runs with.

Pure Python: no sockets, no store, no websockets. The bridge's turn runner
(``bridge_client.bridge.turns``) builds a :class:`TurnContext` over a :class:`TurnSink` and
calls :meth:`Driver.run_turn` in the turn's own thread, whether or not a host reads the turn.

Where the pieces live (every name below is importable from here, as drivers and
the *Writing a driver* guide do): :class:`TurnContext` in ``bridge/context.py`` (its steps'
table in ``bridge/step_moves.py``), the values and sink interfaces in ``bridge/driver_types.py``, the
process-group and child-environment helpers in ``bridge/child_process.py``.

A turn is a sequence of steps (one model call and the tool calls it makes). A driver opens a
step with :meth:`TurnContext.start_step`, emits parts into it, and closes it with
:meth:`TurnContext.finish_step`. After a restart the bridge continues an unfinished turn:
the context then says how many steps are already complete, and the driver goes on from there.
"""
from __future__ import annotations

from typing import Any, Callable, Protocol, Union

# options_object lives with the built-in drivers' option checks, which the host imports too
# (bridge_options checks options at once); re-exported here for drivers (docs/writing-a-driver.md).
from ..driver_options import options_object
from .child_process import child_environ, process_group_ended, process_group_started, session_env
from .context import TurnContext
from .driver_types import Decision, InteractiveSink, TurnResult, TurnSink

__all__ = [
    "Driver",
    "DriverFactory",
    "TurnResult",
    "TurnContext",
    "TurnSink",
    "Decision",
    "InteractiveSink",
    "options_object",
    "process_group_started",
    "process_group_ended",
    "child_environ",
    "session_env",
]


class Driver(Protocol):
    """An agent, as the bridge runs it.

    Attributes:
        agent_id: the agent's id; it must equal ``agentId`` in ``launch.json`` and is what
            ``Hello`` answers with.
        supports_approvals: optional (read with ``getattr``, default ``False``): the driver
            asks before its tool calls with :meth:`TurnContext.ask_approval` when
            :attr:`TurnContext.approvals` is on. A session that turns approvals on for a
            driver without it is refused (``ApprovalsUnsupported``).
        supports_messages: optional (default ``False``): the driver takes user messages
            added to a running turn (:meth:`TurnContext.take_messages`,
            :meth:`TurnContext.wait_message`). Without it, ``SendMessage`` is refused
            (``MessagesUnsupported``).

    Optional methods, looked up with ``getattr``:
        ``initial_state() -> JSON``: the ``data`` of a new session (``None`` without it).
        ``close() -> None``: called once when the bridge shuts down (stop child processes).
        ``session_closed(session_id: str) -> None``: called after ``CloseSession`` is
        recorded, in the RPC's thread: free what the driver keeps for that session (an agent
        process). The session's running turns go on; a turn of it may still come later (the
        session may be opened again, or a turn continued), so keep nothing that cannot be
        made again. An exception is logged, and the close still succeeds.
    """

    agent_id: str

    def run_turn(self, ctx: "TurnContext") -> "Union[None, str, TurnResult]":
        """Run one turn (or the rest of it, after a restart: see ``ctx.completed_steps``).

        Called in the turn's own thread. Emit parts through ``ctx``; return ``None`` (finish
        reason ``stop``), a finish reason, or a :class:`TurnResult`. An exception ends the turn
        with ``error``; a set ``ctx.cancelled`` ends it with ``cancelled`` whatever is returned.
        """
        ...


DriverFactory = Callable[[Any], Driver]
"""Makes a driver from the ``agentOptions`` of ``launch.json`` (plain JSON, maybe ``None``).
Raises ``ValueError`` (or anything else) for options it cannot take: the bridge then exits 2."""


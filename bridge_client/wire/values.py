"""The states and RPC results that ride inside the envelope: ``SessionState``, ``TurnState``,
``HelloResult``, ``StartTurnResult`` (see :doc:`protocol`, "Values").

Each is a frozen slotted dataclass (:mod:`.slotted`) with camelCase JSON and a hand-written
``from_dict`` that checks every field (:mod:`.decode`). Their public home stays
:mod:`bridge_client.wire.parts`, which re-exports them.
"""

from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from ..errors import ProtocolError
from .decode import _int, _obj, _opt_str, _str
from .slotted import _JSON_VALUE, _maker, _slotted, _Value

__all__ = ["PROTOCOL_VERSION", "TURN_STATUSES", "SessionState", "TurnState", "HelloResult", "StartTurnResult"]

PROTOCOL_VERSION = 1
"""The protocol version this package speaks (see :doc:`protocol`)."""

TURN_STATUSES = ("started", "running", "continued", "finished")
"""The ``status`` values of ``StartTurn`` and ``CancelTurn`` results."""

# ----------------------------------------------------------------------------- states


@_slotted
@dataclass(frozen=True)
class SessionState(_Value):
    """What the bridge last gave for a session: ``{sessionId, revision, data}``.

    Attributes:
        session_id: the session's id.
        revision: grows by one at every change the bridge makes; the higher one wins in ``OpenSession``.
        data: the driver's own JSON (enough to start the session again in a fresh bridge).
    """

    session_id: str
    revision: int
    data: Any = field(metadata=_JSON_VALUE)

    def to_dict(self, encode_json: bool = False) -> Dict[str, Any]:
        """Return ``{"sessionId", "revision", "data"}``."""
        return {"sessionId": self.session_id, "revision": self.revision, "data": self.data}

    @classmethod
    def from_dict(cls, kvs: Any, *, infer_missing: bool = False) -> "SessionState":
        """Check and build from a JSON object. Raises :class:`ProtocolError`."""
        d = _obj(kvs, "SessionState")
        w = "SessionState"
        made: SessionState = _MAKE.get(cls, cls)(
            _str(d, "sessionId", w), _int(d, "revision", w), d.get("data")
        )
        return made


@_slotted
@dataclass(frozen=True)
class TurnState(_Value):
    """Enough for any host to continue a turn: what ``turn-start`` carries.

    ``{protocol, agentId, bridgeId, sessionId, turnId, prompt, startedAt, generation}``;
    ``startedAt`` is an ISO 8601 UTC timestamp. ``generation`` names the bridge store that
    holds the turn's log (``None`` in states written before stores had one). Safe to store and
    move between hosts.
    """

    protocol: int
    agent_id: str
    bridge_id: str
    session_id: str
    turn_id: str
    prompt: str
    started_at: str
    generation: Optional[str] = None

    def to_dict(self, encode_json: bool = False) -> Dict[str, Any]:
        """Return the camelCase JSON object (``generation`` is ``null`` when unknown)."""
        d: Dict[str, Any] = {
            "protocol": self.protocol,
            "agentId": self.agent_id,
            "bridgeId": self.bridge_id,
            "sessionId": self.session_id,
            "turnId": self.turn_id,
            "prompt": self.prompt,
            "startedAt": self.started_at,
        }
        d["generation"] = self.generation
        return d

    @classmethod
    def from_dict(cls, kvs: Any, *, infer_missing: bool = False) -> "TurnState":
        """Check and build from a JSON object. Raises :class:`ProtocolError`."""
        d = _obj(kvs, "TurnState")
        w = "TurnState"
        return _MAKE.get(cls, cls)(  # type: ignore[no-any-return]  # (a TurnState)
            _int(d, "protocol", w, 1),
            _str(d, "agentId", w),
            _str(d, "bridgeId", w),
            _str(d, "sessionId", w),
            _str(d, "turnId", w),
            _str(d, "prompt", w),
            _str(d, "startedAt", w),
            _opt_str(d, "generation", w),
        )


@_slotted
@dataclass(frozen=True)
class HelloResult(_Value):
    """The answer to ``Hello``: who answers on this port (agent id, bridge id, protocol), and
    the generation of its store (``None`` from a bridge that does not say; see
    ``TurnState``)."""

    agent_id: str
    bridge_id: str
    instance: str
    protocol: int
    pid: int
    started_at: str
    generation: Optional[str] = None

    def to_dict(self, encode_json: bool = False) -> Dict[str, Any]:
        """Return the camelCase JSON object (``generation`` is ``null`` when unknown)."""
        d: Dict[str, Any] = {
            "agentId": self.agent_id,
            "bridgeId": self.bridge_id,
            "instance": self.instance,
            "protocol": self.protocol,
            "pid": self.pid,
            "startedAt": self.started_at,
        }
        d["generation"] = self.generation
        return d

    @classmethod
    def from_dict(cls, kvs: Any, *, infer_missing: bool = False) -> "HelloResult":
        """Check and build from a JSON object. Raises :class:`ProtocolError`."""
        d = _obj(kvs, "Hello")
        w = "Hello"
        return cls(
            _str(d, "agentId", w),
            _str(d, "bridgeId", w),
            _str(d, "instance", w),
            _int(d, "protocol", w),
            _int(d, "pid", w),
            _str(d, "startedAt", w),
            _opt_str(d, "generation", w),
        )


@_slotted
@dataclass(frozen=True)
class StartTurnResult(_Value):
    """The answer to ``StartTurn`` and ``CancelTurn``: ``{turnId, status}``."""

    turn_id: str
    status: str

    def to_dict(self, encode_json: bool = False) -> Dict[str, Any]:
        """Return ``{"turnId", "status"}``."""
        return {"turnId": self.turn_id, "status": self.status}

    @classmethod
    def from_dict(cls, kvs: Any, *, infer_missing: bool = False) -> "StartTurnResult":
        """Check and build from a JSON object. Raises :class:`ProtocolError`."""
        d = _obj(kvs, "TurnStatus")
        status = _str(d, "status", "TurnStatus")
        if status not in TURN_STATUSES:
            raise ProtocolError(f"TurnStatus.status must be one of {', '.join(TURN_STATUSES)}")
        made: StartTurnResult = _MAKE.get(cls, cls)(_str(d, "turnId", "TurnStatus"), status)
        return made


# Builders of checked values for from_dict (a subclass is built by its own __init__).
_MAKE: Dict[type, Any] = {cls: _maker(cls) for cls in (SessionState, TurnState, StartTurnResult)}

# Pickles and the docs name these classes where users import them: a state pickled by this
# release loads in a release that had them all in wire/parts.py, and the other way round.
for _cls in (SessionState, TurnState, HelloResult, StartTurnResult):
    _cls.__module__ = "bridge_client.wire.parts"
del _cls

"""The RPC envelope: Effect RPC's JSON messages, as values (see :doc:`protocol`, "Envelope").

Sans-I/O: text or bytes go in, message values come out, and back. Nothing here touches a
socket, a thread or a clock.

Host to bridge: :class:`Request`, :class:`Ack`, :class:`Interrupt`, :class:`Ping` (and
:class:`Eof`, which Effect clients may send; we never do).
Bridge to host: :class:`Chunk`, :class:`Exit`, :class:`Defect`, :class:`Pong`.

Decoding checks every field and raises :class:`~bridge_client.errors.ProtocolError` naming
the field; when the bad message still carried a usable request id, the error's
``request_id`` attribute holds it so the bridge can answer that request alone (with
``BadRequest``) and keep the connection.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence, Tuple, Union

from ..errors import ProtocolError

__all__ = [
    "RequestId",
    "Request",
    "Ack",
    "Interrupt",
    "Ping",
    "Eof",
    "Chunk",
    "Exit",
    "Defect",
    "Pong",
    "Success",
    "Failure",
    "Fail",
    "Die",
    "Interrupted",
    "HostMessage",
    "BridgeMessage",
    "FrameError",
    "encode",
    "encode_request",
    "encode_chunk_raw",
    "parse_frame",
    "host_message",
    "bridge_message",
    "decode_host",
    "decode_bridge",
]

RequestId = Union[int, str]
"""A request id: a JSON number (integer) or string, echoed back with the same JSON type."""


class FrameError(ProtocolError):
    """A message that broke the envelope; ``request_id`` is its id when one could be read."""

    def __init__(self, message: str, request_id: Optional[RequestId] = None) -> None:
        self.request_id = request_id
        super().__init__(message)


# ----------------------------------------------------------------------------- host → bridge


@dataclass(frozen=True)
class Request:
    """``{"_tag":"Request","id":ID,"tag":NAME,"payload":P,"headers":[[k,v],...]}``."""

    id: RequestId
    tag: str
    payload: Any = field(default=None, repr=False)  # may hold secrets (a session's env)
    headers: Tuple[Tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Ack:
    """``{"_tag":"Ack","requestId":ID}``: the host took the last Chunk of that stream."""

    request_id: RequestId


@dataclass(frozen=True)
class Interrupt:
    """``{"_tag":"Interrupt","requestId":ID}``: stop that request (a ReadTurn stops reading)."""

    request_id: RequestId


@dataclass(frozen=True)
class Ping:
    """``{"_tag":"Ping"}``: keepalive; the bridge answers :class:`Pong`."""


@dataclass(frozen=True)
class Eof:
    """``{"_tag":"Eof"}``: an Effect client says it sends nothing more. We never send it."""


# ----------------------------------------------------------------------------- bridge → host


@dataclass(frozen=True)
class Success:
    """``{"_tag":"Success","value":V}``; ``value`` is ``None`` for no value or end of stream."""

    value: Any = None


@dataclass(frozen=True)
class Fail:
    """``{"_tag":"Fail","error":E}``: a typed error (a JSON object with a string ``_tag``)."""

    error: Any


@dataclass(frozen=True)
class Die:
    """``{"_tag":"Die","defect":D}``: a bug, or a request the bridge could not decode."""

    defect: Any


@dataclass(frozen=True)
class Interrupted:
    """``{"_tag":"Interrupt","fiberId":null}``: the request was interrupted."""

    fiber_id: Any = None


Cause = Union[Fail, Die, Interrupted]


@dataclass(frozen=True)
class Failure:
    """``{"_tag":"Failure","cause":[C,...]}``."""

    cause: Tuple[Cause, ...] = field(default_factory=tuple)


ExitValue = Union[Success, Failure]


@dataclass(frozen=True)
class Chunk:
    """``{"_tag":"Chunk","requestId":ID,"values":[v,...]}``; ``values`` is never empty."""

    request_id: RequestId
    values: Sequence[Any]


@dataclass(frozen=True)
class Exit:
    """``{"_tag":"Exit","requestId":ID,"exit":EXIT}``: the request's final answer."""

    request_id: RequestId
    exit: ExitValue


@dataclass(frozen=True)
class Defect:
    """``{"_tag":"Defect","defect":D}``: the connection is unusable; every pending request fails."""

    defect: Any


@dataclass(frozen=True)
class Pong:
    """``{"_tag":"Pong"}``: the answer to :class:`Ping`."""


HostMessage = Union[Request, Ack, Interrupt, Ping, Eof]
BridgeMessage = Union[Chunk, Exit, Defect, Pong]


# ----------------------------------------------------------------------------- encoding


# One encoder for every frame: json.dumps with options builds a new one per call.
_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def _cause_to_json(cause: Cause) -> Any:
    if isinstance(cause, Fail):
        return {"_tag": "Fail", "error": cause.error}
    if isinstance(cause, Die):
        return {"_tag": "Die", "defect": cause.defect}
    return {"_tag": "Interrupt", "fiberId": cause.fiber_id}


def _exit_to_json(value: ExitValue) -> Any:
    if isinstance(value, Success):
        return {"_tag": "Success", "value": value.value}
    return {"_tag": "Failure", "cause": [_cause_to_json(c) for c in value.cause]}


def to_json(message: Union[HostMessage, BridgeMessage]) -> Any:
    """Return ``message`` as the JSON object (``dict``) the protocol gives for it (see
    :doc:`protocol`)."""
    if isinstance(message, Request):
        return {
            "_tag": "Request",
            "id": message.id,
            "tag": message.tag,
            "payload": message.payload,
            "headers": [list(h) for h in message.headers],
        }
    if isinstance(message, Chunk):
        return {"_tag": "Chunk", "requestId": message.request_id, "values": list(message.values)}
    if isinstance(message, Exit):
        return {"_tag": "Exit", "requestId": message.request_id, "exit": _exit_to_json(message.exit)}
    if isinstance(message, Ack):
        return {"_tag": "Ack", "requestId": message.request_id}
    if isinstance(message, Interrupt):
        return {"_tag": "Interrupt", "requestId": message.request_id}
    if isinstance(message, Defect):
        return {"_tag": "Defect", "defect": message.defect}
    if isinstance(message, (Ping, Pong, Eof)):
        return {"_tag": type(message).__name__}
    raise TypeError(f"not a wire message: {type(message).__name__}")


def encode(message: Union[HostMessage, BridgeMessage]) -> str:
    """Encode one message as compact JSON text, ready for one WebSocket text frame.

    Raises:
        TypeError: ``message`` is not a wire message, or holds a value JSON cannot carry.
        ValueError: a float in it is NaN or infinite.
    """
    return _dumps(to_json(message))


def encode_request(request_id: RequestId, tag: str, payload: Any) -> str:
    """Encode a Request without headers: what ``encode(Request(request_id, tag, payload))``
    gives, without building the message first (the host's turn path). Raises as
    :func:`encode` does."""
    return _dumps({"_tag": "Request", "id": request_id, "tag": tag, "payload": payload, "headers": []})


def encode_chunk_raw(request_id: RequestId, raw_values: Sequence[str]) -> str:
    """Encode a Chunk whose values are already JSON text (as the bridge's log stores parts).

    Splicing stored JSON avoids decoding and re-encoding every part on the bridge's hot path.

    Args:
        request_id: the id of the streaming request.
        raw_values: one or more JSON texts, each one value.

    Raises:
        ValueError: ``raw_values`` is empty (a Chunk is never empty).
    """
    if not raw_values:
        raise ValueError("a Chunk is never empty")
    return '{"_tag":"Chunk","requestId":%s,"values":[%s]}' % (_dumps(request_id), ",".join(raw_values))


# ----------------------------------------------------------------------------- decoding


def parse_frame(data: Union[str, bytes]) -> List[Any]:
    """Parse one WebSocket message into its JSON objects (a batch array gives several).

    Args:
        data: a text frame (``str``) or a binary frame (``bytes``, UTF-8 JSON).

    Returns:
        The list of JSON values (each still to be checked with :func:`host_message` or
        :func:`bridge_message`).

    Raises:
        FrameError: not UTF-8, not JSON, or neither an object nor a non-empty array.
    """
    if isinstance(data, (bytes, bytearray, memoryview)):
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FrameError(f"frame is not UTF-8: {exc.reason} at byte {exc.start}") from None
    try:
        value = json.loads(data)
    except ValueError as exc:
        raise FrameError(f"frame is not JSON: {exc}") from None
    except RecursionError:
        raise FrameError("frame is not JSON we accept: nested too deeply") from None
    if isinstance(value, dict):
        return [value]
    if isinstance(value, list) and value:
        return value
    raise FrameError("frame must be a JSON object or a non-empty array of objects")


def _is_id(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, str)


def _request_id(obj: Any, key: str) -> RequestId:
    value = obj.get(key)
    if not _is_id(value):
        raise FrameError(f"{obj.get('_tag')}.{key} must be an integer or a string, got {_kind(value)}")
    if isinstance(value, str):
        # JSON may carry a lone surrogate ("\ud800"), which no UTF-8 frame can echo back.
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise FrameError(f"{obj.get('_tag')}.{key} is not valid Unicode (a lone surrogate)") from None
    return value  # type: ignore[no-any-return]


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number"}.get(
        type(value), type(value).__name__
    )


def _headers(obj: Any, request_id: RequestId) -> Tuple[Tuple[str, str], ...]:
    raw = obj["headers"]
    if not isinstance(raw, list):
        raise FrameError(
            f"Request.headers must be an array of [key, value] pairs, got {_kind(raw)}", request_id
        )
    pairs = []
    for pair in raw:
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            raise FrameError("Request.headers must hold [string, string] pairs", request_id)
        pairs.append((pair[0], pair[1]))
    return tuple(pairs)


def host_message(obj: Any) -> HostMessage:
    """Check one JSON value sent by a host and return it as a message.

    Raises:
        FrameError: unknown or missing ``_tag``, or a missing or mistyped field (with
            ``request_id`` set when the id itself was readable).
    """
    if not isinstance(obj, dict):
        raise FrameError(f"message must be a JSON object, got {_kind(obj)}")
    tag = obj.get("_tag")
    if tag == "Request":
        request_id = _request_id(obj, "id")
        name = obj.get("tag")
        if not isinstance(name, str) or not name:
            raise FrameError("Request.tag must be a non-empty string", request_id)
        if "payload" not in obj:
            raise FrameError("Request.payload is missing (send null for none)", request_id)
        if "headers" not in obj:
            raise FrameError("Request.headers is missing (send [] for none)", request_id)
        return Request(request_id, name, obj["payload"], _headers(obj, request_id))
    if tag == "Ack":
        return Ack(_request_id(obj, "requestId"))
    if tag == "Interrupt":
        return Interrupt(_request_id(obj, "requestId"))
    if tag == "Ping":
        return Ping()
    if tag == "Eof":
        return Eof()
    raise FrameError(f"unknown message _tag {tag!r} from a host")


def _cause(obj: Any) -> Cause:
    if not isinstance(obj, dict):
        raise FrameError(f"Failure.cause items must be objects, got {_kind(obj)}")
    tag = obj.get("_tag")
    if tag == "Fail":
        if "error" not in obj:
            raise FrameError("Fail.error is missing")
        return Fail(obj["error"])
    if tag == "Die":
        return Die(obj.get("defect"))
    if tag == "Interrupt":
        return Interrupted(obj.get("fiberId"))
    raise FrameError(f"unknown cause _tag {tag!r}")


def _exit(obj: Any) -> ExitValue:
    if not isinstance(obj, dict):
        raise FrameError(f"Exit.exit must be an object, got {_kind(obj)}")
    tag = obj.get("_tag")
    if tag == "Success":
        return Success(obj.get("value"))
    if tag == "Failure":
        causes = obj.get("cause")
        if not isinstance(causes, list):
            raise FrameError(f"Failure.cause must be an array, got {_kind(causes)}")
        return Failure(tuple(_cause(c) for c in causes))
    raise FrameError(f"unknown exit _tag {tag!r}")


def bridge_message(obj: Any) -> BridgeMessage:
    """Check one JSON value sent by a bridge and return it as a message.

    Raises:
        FrameError: unknown or missing ``_tag``, or a missing or mistyped field.
    """
    if not isinstance(obj, dict):
        raise FrameError(f"message must be a JSON object, got {_kind(obj)}")
    tag = obj.get("_tag")
    if tag == "Chunk":
        request_id = _request_id(obj, "requestId")
        values = obj.get("values")
        if not isinstance(values, list) or not values:
            raise FrameError("Chunk.values must be a non-empty array", request_id)
        return Chunk(request_id, values)
    if tag == "Exit":
        request_id = _request_id(obj, "requestId")
        try:
            return Exit(request_id, _exit(obj.get("exit")))
        except FrameError as exc:
            raise FrameError(str(exc), request_id) from None
    if tag == "Pong":
        return Pong()
    if tag == "Defect":
        return Defect(obj.get("defect"))
    if tag == "ClientProtocolError":
        # Effect servers report a client's protocol error this way; to us it is a defect of
        # the connection.
        return Defect(obj.get("error"))
    raise FrameError(f"unknown message _tag {tag!r} from a bridge")


def decode_host(data: Union[str, bytes]) -> List[HostMessage]:
    """Parse and check a whole frame sent by a host. Raises :class:`FrameError`."""
    return [host_message(obj) for obj in parse_frame(data)]


def decode_bridge(data: Union[str, bytes]) -> List[BridgeMessage]:
    """Parse and check a whole frame sent by a bridge. Raises :class:`FrameError`."""
    return [bridge_message(obj) for obj in parse_frame(data)]

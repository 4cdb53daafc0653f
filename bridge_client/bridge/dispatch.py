"""The bridge's RPC dispatch: a request decoded by the catalogue (:mod:`bridge_client.wire.rpcs`),
the quick RPCs answered by calling the turn manager, and every outcome turned into the value
of the request's ``Exit``: ``Success``, a typed error (``Fail``), or a defect (``Die``).

No I/O: the connection (:mod:`bridge_client.bridge.connection`) sends what this returns, and
opens the ``ReadTurn`` streams itself.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Dict, Tuple, Union

from ..errors import BadRequest, RpcError
from ..wire.frames import Die, ExitValue, Fail, Failure, Request, Success
from ..wire.rpcs import CATALOGUE, Rpc
from .portable import portable_handlers
from .store import json_text
from .turns import TurnManager

__all__ = ["Dispatcher", "check_unicode", "die", "fail", "frame_text", "rpc_handlers"]

log = logging.getLogger("bridge_client.bridge.server")  # one logger for all the server's modules

Handler = Callable[..., Any]


def rpc_handlers(manager: TurnManager, hello: Callable[[], Dict[str, Any]]) -> Dict[str, Handler]:
    """The quick (not streaming) RPCs, by tag: each takes the payload's snake_case fields as
    keyword arguments and returns the ``Success`` value, or raises an
    :class:`~bridge_client.errors.RpcError` (the typed error the host gets).

    Args:
        manager: the sessions and turns the RPCs act on.
        hello: returns the ``Hello`` answer (agent id, bridge id, instance id).
    """
    return {
        "Hello": hello,
        "OpenSession": manager.open_session,
        "StartTurn": manager.start_turn,
        "CancelTurn": manager.cancel_turn,
        "CloseSession": manager.close_session,
        "AnswerApproval": manager.answer_approval,
        "SendMessage": manager.send_message,
        "ClaimHostTool": manager.claim_host_tool,
        "AnswerHostTool": manager.answer_host_tool,
        **portable_handlers(manager),  # ExportSession, ImportSession, MoveSession
    }


def check_unicode(payload: Any) -> None:
    """Refuse strings the store cannot keep: JSON may carry a lone surrogate (``"\\ud800"``),
    which is not valid Unicode (a typed failure, not a dead writer).

    Raises:
        BadRequest: the payload holds a lone surrogate.
    """
    try:
        json_text(payload)
    except ValueError as exc:
        raise BadRequest(f"payload: {exc}") from None


def frame_text(message: str) -> str:
    """``message`` as text any UTF-8 frame can carry: lone surrogates (from the peer's own
    JSON) become ``\\udxxx`` escapes."""
    return message.encode("utf-8", "backslashreplace").decode("utf-8")


def fail(error: Dict[str, Any]) -> Failure:
    """The Exit value of a typed error (``Fail``; ``error`` as :meth:`RpcError.to_wire` gives it)."""
    return Failure((Fail(error),))


def die(message: str) -> Failure:
    """The Exit value of a defect (``Die``): a bad request or a bug, for this request alone."""
    return Failure((Die(frame_text(message)),))


class Dispatcher:
    """Decodes requests and answers the quick RPCs through ``handlers`` (see
    :func:`rpc_handlers`; the same dict, so that a change to it is seen). Thread-safe as far
    as the handlers are: any connection's thread calls it.
    """

    def __init__(self, handlers: Dict[str, Handler]) -> None:
        self.handlers = handlers

    def decode(self, request: Request) -> Union[Tuple[Rpc, Dict[str, Any]], Failure]:
        """The request's catalogue row and its payload as keyword arguments, or the Failure
        to answer it with: ``Die`` for an unknown RPC, ``Fail`` (``BadRequest``,
        ``RevisionExhausted``) for a payload of the wrong shape or with a lone surrogate."""
        rpc = CATALOGUE.get(request.tag)
        if rpc is None:
            return die(f"unknown RPC {request.tag!r}")
        try:
            args = rpc.decode_payload(request.payload)
            check_unicode(request.payload)
        except RpcError as exc:  # BadRequest, RevisionExhausted
            return fail(exc.to_wire())
        return rpc, args

    def call(self, rpc: Rpc, args: Dict[str, Any], number: int) -> ExitValue:
        """Run a quick RPC (not a stream) and return its Exit value: ``Success``, ``Fail``
        for an :class:`~bridge_client.errors.RpcError`, ``Die`` for any other exception (a
        bug, logged with connection ``number``). Never raises."""
        try:
            value = self.handlers[rpc.tag](**args)
        except RpcError as exc:
            return fail(exc.to_wire())
        except Exception as exc:
            log.exception("connection %d: %s failed", number, rpc.tag)
            return die(f"{type(exc).__name__}: {exc}")
        return Success(value)

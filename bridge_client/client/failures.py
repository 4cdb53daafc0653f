"""The exception a caller sees for a request the bridge answered with ``Exit Failure``.

A typed failure (``Fail`` carrying ``{"_tag": NAME, ...}``) becomes the matching
:class:`~bridge_client.errors.RpcError`; anything else (an untyped error, a ``Die``, an
interrupt) becomes :class:`~bridge_client.errors.ProtocolError`. See :doc:`protocol`.
"""
from __future__ import annotations

from ..errors import ProtocolError, rpc_error_from_wire
from ..wire.frames import Die, Fail, Failure

__all__ = ["failure_error"]


def failure_error(exit_value: Failure) -> Exception:
    """Turn a ``Failure`` exit into the exception the caller sees (messages cut to 500
    characters)."""
    for cause in exit_value.cause:
        if isinstance(cause, Fail):
            if isinstance(cause.error, dict) and isinstance(cause.error.get("_tag"), str):
                return rpc_error_from_wire(cause.error)
            return ProtocolError(f"the bridge failed with an untyped error: {cause.error!r}"[:500])
    for cause in exit_value.cause:
        if isinstance(cause, Die):
            return ProtocolError(f"the bridge could not serve the request: {cause.defect}"[:500])
    return ProtocolError("the request was interrupted by the bridge")

"""The field checks of the wire values' hand-written ``from_dict`` methods: each takes
``(object, key, where)``, checks one field and raises
:class:`~bridge_client.errors.ProtocolError` naming it (``where.key``).

dataclasses-json's own ``from_dict`` is lenient about types and builds ~16,000 objects per
second, too slow for a stream of parts; these are the checks it would skip.
"""

from typing import Any, Callable, Mapping, Optional, Tuple

from ..errors import ProtocolError

__all__ = ["MAX_SAFE_INTEGER", "REVISION_HEADROOM", "MAX_OPEN_REVISION"]

# Each part type: (attribute, JSON key, decoder). Decoders take (dict, key, where).
_Decoder = Callable[[Mapping[str, Any], str, str], Any]


def _get(d: Mapping[str, Any], key: str, where: str) -> Any:
    try:
        return d[key]
    except KeyError:
        raise ProtocolError(f"{where}.{key} is missing") from None
    except TypeError:
        raise ProtocolError(f"{where} must be a JSON object") from None


def _str(d: Mapping[str, Any], key: str, where: str) -> str:
    value = _get(d, key, where)
    if not isinstance(value, str):
        raise ProtocolError(f"{where}.{key} must be a string")
    return value


def _opt_str(d: Mapping[str, Any], key: str, where: str) -> Optional[str]:
    value = d.get(key)
    if value is not None and not isinstance(value, str):
        raise ProtocolError(f"{where}.{key} must be a string or null")
    return value


MAX_SAFE_INTEGER = 2**53 - 1
"""The largest integer every JSON peer reads exactly (JavaScript's Number.MAX_SAFE_INTEGER);
offsets, steps, attempts and revisions must stay at or below it."""

REVISION_HEADROOM = 2**32
"""Revisions a session must have room for: ``OpenSession`` refuses a state whose revision is
above ``MAX_SAFE_INTEGER - REVISION_HEADROOM`` (it could not change for long)."""

MAX_OPEN_REVISION = MAX_SAFE_INTEGER - REVISION_HEADROOM
"""The highest revision ``OpenSession`` accepts."""


def _int(d: Mapping[str, Any], key: str, where: str, minimum: int = 0) -> int:
    value = _get(d, key, where)
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= MAX_SAFE_INTEGER:
        raise ProtocolError(f"{where}.{key} must be an integer from {minimum} to 2**53-1")
    return value


def _opt_int(d: Mapping[str, Any], key: str, where: str) -> Optional[int]:
    value = d.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_SAFE_INTEGER:
        raise ProtocolError(f"{where}.{key} must be an integer from 0 to 2**53-1, or null")
    return value


def _bool(d: Mapping[str, Any], key: str, where: str) -> bool:
    value = _get(d, key, where)
    if not isinstance(value, bool):
        raise ProtocolError(f"{where}.{key} must be a boolean")
    return value


def _obj(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ProtocolError(f"{where} must be a JSON object")
    return value



def _any(d: Mapping[str, Any], key: str, where: str) -> Any:
    return d.get(key)


def _required_any(d: Mapping[str, Any], key: str, where: str) -> Any:
    return _get(d, key, where)



def _str_list(d: Mapping[str, Any], key: str, where: str) -> Tuple[str, ...]:
    value = _get(d, key, where)
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise ProtocolError(f"{where}.{key} must be an array of strings")
    return tuple(value)


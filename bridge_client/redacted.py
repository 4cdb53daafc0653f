"""Secrets that never show: in ``repr``, ``str``, logs, tracebacks or pickles.

See :doc:`security` for how tokens are made and checked."""
from __future__ import annotations

import hashlib
import hmac
from typing import Callable, NoReturn, Union

__all__ = ["Redacted", "hmac_token", "TokenFunction"]


class Redacted:
    """A secret string that hides itself.

    ``repr()`` and ``str()`` give ``<redacted>``; pickling raises ``TypeError``; equality is
    compared in constant time. Read the secret with :meth:`reveal`, only where it is used.

    Args:
        value: the secret, a non-empty ``str``.

    Raises:
        TypeError: ``value`` is not a ``str``.
        ValueError: ``value`` is empty.
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError("Redacted takes a str")
        if not value:
            raise ValueError("Redacted takes a non-empty str")
        self._value = value

    def reveal(self) -> str:
        """Return the secret itself. Keep the result out of logs and messages."""
        return self._value

    def __repr__(self) -> str:
        return "<redacted>"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Redacted):
            return NotImplemented
        return hmac.compare_digest(self._value.encode(), other._value.encode())

    def __hash__(self) -> int:
        return hash(("Redacted", hashlib.sha256(self._value.encode()).digest()))

    def __reduce__(self) -> NoReturn:
        raise TypeError("a Redacted secret cannot be pickled")


TokenFunction = Callable[[str], Redacted]
"""A function from a sandbox id to the token of the bridges in that sandbox."""


def hmac_token(secret: Union[str, bytes, Redacted]) -> TokenFunction:
    """Make a token function: the token of sandbox ``id`` is HMAC-SHA256(secret, id), in hex.

    Every host that holds the same secret computes the same token for a sandbox, so each
    connects to a bridge any of them launched.

    Args:
        secret: the secret every host shares (``str``, ``bytes`` or :class:`Redacted`).

    Returns:
        A function ``(sandbox_id: str) -> Redacted`` (64 hex characters inside).

    Raises:
        ValueError: the secret is empty.
    """
    if isinstance(secret, Redacted):
        key = secret.reveal().encode()
    elif isinstance(secret, str):
        key = secret.encode()
    else:
        key = bytes(secret)
    if not key:
        raise ValueError("hmac_token needs a non-empty secret")

    def token(sandbox_id: str) -> Redacted:
        return Redacted(hmac.new(key, sandbox_id.encode(), hashlib.sha256).hexdigest())

    return token

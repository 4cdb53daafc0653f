"""Secrets that never show: in ``repr``, ``str``, logs, tracebacks or pickles.

See :doc:`security` for how tokens are made and checked."""
from __future__ import annotations

import hashlib
import hmac
import re
from typing import Callable, NoReturn, Union

from .errors import InvalidToken

__all__ = ["Redacted", "hmac_token", "TokenFunction", "check_token", "MAX_TOKEN_LENGTH"]

MAX_TOKEN_LENGTH = 1024
"""Characters at most in a bridge token (it travels in one HTTP header line)."""

# RFC 6750's b64token: what may follow "Bearer " in an Authorization header.
_TOKEN = re.compile(r"[A-Za-z0-9._~+/-]+=*")


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

    @classmethod
    def token(cls, value: str) -> "Redacted":
        """Make a bridge token, checked with :func:`check_token`.

        Raises:
            InvalidToken: ``value`` cannot be sent as ``Authorization: Bearer <value>``.
        """
        if not isinstance(value, str):
            raise InvalidToken(f"a token must be a str, got {type(value).__name__}")
        if not value:
            raise InvalidToken("the token is empty")
        return check_token(cls(value))

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


def _what_is_wrong(value: str) -> str:
    """Say what keeps ``value`` from being a bearer token, without showing the value."""
    if len(value) > MAX_TOKEN_LENGTH:
        return f"is {len(value)} characters long, more than {MAX_TOKEN_LENGTH}"
    for at, char in enumerate(value, 1):
        if char in "\r\n":
            return f"holds a line break at character {at} of {len(value)} (a trailing newline from a file?)"
        if char.isspace():
            return f"holds whitespace at character {at} of {len(value)}"
        if not char.isascii():
            return f"holds a non-ASCII character at character {at} of {len(value)}"
        if not char.isprintable():
            return f"holds a control character at character {at} of {len(value)}"
    if "=" in value.rstrip("="):
        return "holds '=' before its end (only trailing '=' padding may follow the token)"
    return "holds a character other than ASCII letters, digits and -._~+/"


def check_token(token: object, where: str = "the token") -> Redacted:
    """Check that ``token`` can be sent as ``Authorization: Bearer <token>``, and return it.

    A token is 1 to 1,024 characters of ASCII letters, digits and
    ``-._~+/``, optionally followed by ``=`` padding (RFC 6750). Nothing is trimmed: a
    trailing newline or a space is an error, so that every host sends the same token and the
    bridge never refuses one for a reason it cannot tell. The message never shows the token.
    See :doc:`security`.

    Args:
        token: a :class:`Redacted` (what a token function returns).
        where: how the message names the token (e.g. ``"the token of sandbox X"``).

    Raises:
        InvalidToken: ``token`` is not a ``Redacted``, or its value is not a bearer token.
    """
    if not isinstance(token, Redacted):
        raise InvalidToken(f"{where} must be a Redacted (see hmac_token), got {type(token).__name__}")
    value = token.reveal()
    if len(value) <= MAX_TOKEN_LENGTH and _TOKEN.fullmatch(value):
        return token
    raise InvalidToken(f"{where} {_what_is_wrong(value)}; a token is ASCII letters, digits and -._~+/")


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
        TypeError: the secret is not a ``str``, ``bytes`` or ``Redacted``.
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
        if not isinstance(sandbox_id, str):
            raise TypeError(f"a sandbox id is a str, got {type(sandbox_id).__name__}")
        return Redacted.token(hmac.new(key, sandbox_id.encode(), hashlib.sha256).hexdigest())

    return token

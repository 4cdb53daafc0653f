"""Checks of driver options (``agent_options``) shared by the ``openai``, ``claude-code`` and
``codex`` drivers. Each raises ``ValueError`` naming the driver and the option: the bridge
then exits 2 and ``bridge-client run`` reports bad input (see
:func:`bridge_client.bridge.driver.options_object`)."""

from __future__ import annotations

import math
from typing import Any, Dict

__all__ = ["str_option", "str_list_option", "number_option", "bool_option"]


def str_option(options: Dict[str, Any], driver: str, key: str, allow_none: bool = False) -> None:
    """Check that ``options[key]``, when present, is a non-empty str (or null if allowed).

    Raises:
        ValueError: it is something else.
    """
    if key not in options:
        return
    value = options[key]
    if value is None and allow_none:
        return
    if not isinstance(value, str) or not value:
        raise ValueError(f"{driver} option {key!r} must be a non-empty string, got {value!r}")


def str_list_option(options: Dict[str, Any], driver: str, key: str) -> None:
    """Check that ``options[key]``, when present, is null or a list of str.

    Raises:
        ValueError: it is something else.
    """
    value = options.get(key)
    if value is None:
        return
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise ValueError(f"{driver} option {key!r} must be a list of strings, got {value!r}")


def number_option(
    options: Dict[str, Any],
    driver: str,
    key: str,
    minimum: float = 0,
    integer: bool = False,
    allow_none: bool = True,
    exclusive: bool = False,
) -> None:
    """Check that ``options[key]``, when present, is a finite number >= ``minimum`` (>
    ``minimum`` when ``exclusive``), an integer when ``integer``, or null when allowed.

    Raises:
        ValueError: it is something else.
    """
    if key not in options:
        return
    value = options[key]
    if value is None and allow_none:
        return
    kinds = (int,) if integer else (int, float)
    ok = isinstance(value, kinds) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > minimum if exclusive else value >= minimum)
    if not ok:
        what = "an integer" if integer else "a number"
        raise ValueError(
            f"{driver} option {key!r} must be {what} {'>' if exclusive else '>='} {minimum:g}, got {value!r}"
        )


def bool_option(options: Dict[str, Any], driver: str, key: str) -> None:
    """Check that ``options[key]``, when present, is true or false.

    Raises:
        ValueError: it is something else.
    """
    if key in options and not isinstance(options[key], bool):
        raise ValueError(f"{driver} option {key!r} must be true or false, got {options[key]!r}")

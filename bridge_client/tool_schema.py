"""JSON Schema for a host tool's arguments, from a Python function's signature and type hints.

:func:`function_schema` gives ``{"type": "object", "properties": ..., "required": ...}`` for a
function, each property's ``description`` taken from the docstring's ``Args:`` section
(Google style: ``name: text``, or ``name (type): text``, continued on indented lines).
:func:`first_paragraph` is the docstring's first paragraph (the tool's description).

Types it maps (anything else raises :class:`~bridge_client.errors.BadHostTool`): ``str``,
``int``, ``float``, ``bool``, ``None``, ``list[X]`` / ``List[X]`` / ``Sequence[X]`` /
``tuple[X, ...]``, ``dict[str, X]`` / ``Dict[str, X]`` / ``Mapping[str, X]``,
``Optional[X]``, ``Union[X, Y]`` (``X | Y``), ``Literal[...]`` (of str, int, bool), an
``Enum`` of str or int values, a dataclass, a ``TypedDict`` and ``Any`` (any JSON value).
Pure functions, no I/O.
"""
from __future__ import annotations

import dataclasses
import enum
import inspect
import re
import sys
import types
import typing
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from .errors import BadHostTool

__all__ = ["function_schema", "first_paragraph", "arg_docs"]

_SCALARS: Dict[Any, Dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
}
_LISTS = {list, tuple, set, frozenset, typing.Sequence, typing.List, typing.Tuple}
_DICTS = {dict, typing.Mapping, typing.Dict}
_UNION_TYPES: Tuple[Any, ...] = (typing.Union,) + ((types.UnionType,) if sys.version_info >= (3, 10) else ())
_SECTION = re.compile(
    r"^(Args|Arguments|Parameters|Returns|Raises|Yields|Attributes|Examples?|Notes?)\s*:\s*$"
)
_ARG = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def first_paragraph(doc: Optional[str]) -> str:
    """The first paragraph of a docstring (its lines joined by spaces), or ``""``."""
    text = inspect.cleandoc(doc or "")
    lines: List[str] = []
    for line in text.splitlines():
        if not line.strip():
            if lines:
                break
            continue
        lines.append(line.strip())
    return " ".join(lines)


def arg_docs(doc: Optional[str]) -> Dict[str, str]:
    """The text of each parameter in a docstring's ``Args:`` section, by name."""
    out: Dict[str, str] = {}
    in_args = False
    current: Optional[str] = None
    indent: Optional[int] = None
    for raw in inspect.cleandoc(doc or "").splitlines():
        stripped = raw.strip()
        section = _SECTION.match(stripped)
        if section and len(raw) - len(raw.lstrip()) == 0:
            in_args = section.group(1) in ("Args", "Arguments", "Parameters")
            current, indent = None, None
            continue
        if not in_args or not stripped:
            continue
        level = len(raw) - len(raw.lstrip())
        match = _ARG.match(stripped)
        if match and (indent is None or level <= indent):
            indent = level
            current = match.group(1).lstrip("*")
            out[current] = match.group(2).strip()
        elif current is not None:
            out[current] = (out[current] + " " + stripped).strip()
    return out


def function_schema(fn: Callable[..., Any], where: str) -> Dict[str, Any]:
    """The JSON Schema (draft 2020-12 subset) of ``fn``'s keyword arguments.

    Args:
        fn: a plain function (or a callable object) whose parameters all have type hints.
        where: the tool's name, for messages.

    Returns:
        ``{"type": "object", "properties": {...}, "required": [...],
        "additionalProperties": False}``.

    Raises:
        BadHostTool: a parameter without a hint, a ``*args``/``**kwargs``/positional-only
            parameter, or a hint of a type the agent cannot send as JSON.
    """
    try:
        signature = inspect.signature(fn)
        hints = typing.get_type_hints(fn, include_extras=False)
    except (TypeError, ValueError, NameError) as exc:
        raise BadHostTool(f"host tool {where!r}: cannot read its signature: {exc}") from None
    docs = arg_docs(getattr(fn, "__doc__", None))
    properties: Dict[str, Any] = {}
    required: List[str] = []
    for name, param in signature.parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise BadHostTool(
                f"host tool {where!r}: parameter {name!r} must be a plain named parameter "
                "(no *args, **kwargs or positional-only parameters)"
            )
        if name not in hints:
            raise BadHostTool(f"host tool {where!r}: parameter {name!r} has no type hint")
        schema = type_schema(hints[name], f"{where}.{name}", set())
        if name in docs and docs[name]:
            schema = {**schema, "description": docs[name]}
        if param.default is param.empty:
            required.append(name)
        else:
            if _is_json(param.default):
                schema = {**schema, "default": param.default}
        properties[name] = schema
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def _is_json(value: Any) -> bool:
    if value is None or isinstance(value, (str, bool, int, float)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_json(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json(v) for k, v in value.items())
    return False


def type_schema(hint: Any, where: str, seen: Set[Any]) -> Dict[str, Any]:
    """The JSON Schema of one type hint (see the module docstring for what maps).

    Raises:
        BadHostTool: a type that does not map (named with ``where``), or a recursive one.
    """
    if hint in _SCALARS:
        return dict(_SCALARS[hint])
    if hint is None:
        return {"type": "null"}
    if hint is Any:
        return {}
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in _UNION_TYPES:
        options = [type_schema(a, where, seen) for a in args]
        return {"anyOf": options}
    if origin is typing.Literal:
        if not args or not all(isinstance(a, (str, int)) and not isinstance(a, enum.Enum) for a in args):
            raise BadHostTool(f"{where}: a Literal takes str, int or bool values, got {hint!r}")
        return {"enum": list(args)}
    if origin in _LISTS or hint in _LISTS:
        if origin is tuple and args and args[-1] is not Ellipsis:
            items = [type_schema(a, where, seen) for a in args]
            return {"type": "array", "prefixItems": items, "minItems": len(items), "maxItems": len(items)}
        item = type_schema(args[0], where, seen) if args else {}
        return {"type": "array", "items": item}
    if origin in _DICTS or hint in _DICTS:
        if args and args[0] is not str:
            raise BadHostTool(f"{where}: a dict's keys must be str (JSON object keys), got {hint!r}")
        value = type_schema(args[1], where, seen) if len(args) > 1 else {}
        return {"type": "object", "additionalProperties": value}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        values = [m.value for m in hint]
        if not values or not all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in values):
            raise BadHostTool(f"{where}: an Enum's values must all be str or int, got {hint.__name__}")
        return {"enum": values}
    if isinstance(hint, type) and (dataclasses.is_dataclass(hint) or _is_typeddict(hint)):
        return _record_schema(hint, where, seen)
    raise BadHostTool(f"{where}: type {getattr(hint, '__name__', hint)!r} cannot be sent as JSON")


def _is_typeddict(hint: type) -> bool:
    return issubclass(hint, dict) and hasattr(hint, "__annotations__") and hasattr(hint, "__total__")


def _record_schema(hint: type, where: str, seen: Set[Any]) -> Dict[str, Any]:
    if hint in seen:
        raise BadHostTool(f"{where}: {hint.__name__} refers to itself; recursive types are not supported")
    seen = seen | {hint}
    try:
        fields = typing.get_type_hints(hint)
    except (NameError, TypeError) as exc:
        raise BadHostTool(f"{where}: cannot read the fields of {hint.__name__}: {exc}") from None
    properties = {name: type_schema(t, f"{where}.{name}", seen) for name, t in fields.items()}
    if dataclasses.is_dataclass(hint):
        required = [
            f.name
            for f in dataclasses.fields(hint)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
    else:
        required = sorted(getattr(hint, "__required_keys__", set(fields)))
    out: Dict[str, Any] = {"type": "object", "properties": properties, "required": required}
    out["additionalProperties"] = False
    own_doc = hint.__doc__ and not hint.__doc__.startswith(hint.__name__ + "(")  # not dataclass's own
    doc = first_paragraph(hint.__doc__) if own_doc else ""
    if doc:
        out["description"] = doc
    return out


def convert_arguments(fn: Callable[..., Any], arguments: Dict[str, Any]) -> Dict[str, Any]:
    """The agent's JSON arguments as ``fn``'s parameters want them: an Enum parameter gets its
    member, a dataclass parameter its instance (one level: their own fields stay JSON).

    Raises:
        ValueError, TypeError: a value that is not one of the Enum's, or fields that do not
            fit the dataclass.
    """
    try:
        hints = typing.get_type_hints(fn)
    except (TypeError, ValueError, NameError):
        return dict(arguments)
    out = dict(arguments)
    for name, value in arguments.items():
        hint = hints.get(name)
        if isinstance(hint, type) and issubclass(hint, enum.Enum) and not isinstance(value, hint):
            out[name] = hint(value)
        elif isinstance(hint, type) and dataclasses.is_dataclass(hint) and isinstance(value, dict):
            out[name] = hint(**value)
    return out

"""The base of every wire value: a frozen dataclass remade with slots, with camelCase JSON
methods (``to_json``/``from_json``) and a marshmallow ``schema()`` made on first use.

dataclasses-json (and marshmallow) are imported only when a schema is asked for
(:mod:`._schema`): neither the bridge nor a reading host loads them.
"""

import dataclasses
import json
from typing import Any, Callable, Dict, List, Set, Type, TypeVar

from ..errors import ProtocolError

__all__: List[str] = []

T = TypeVar("T")

_JSON_VALUE_OPTIONS: Dict[str, Any] = {}
"""dataclasses-json's options of a field that holds any JSON value; :mod:`._schema` fills in
its marshmallow field (``Raw``) when it first builds a schema (dataclasses-json mistakes bare
``Any`` for Optional)."""

_JSON_VALUE = {"dataclasses_json": _JSON_VALUE_OPTIONS}
"""Field metadata for any JSON value."""


def _frozen_setattr(self: Any, name: str, value: Any) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self: Any, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


def _slotted(cls: Type[T]) -> Type[T]:
    """Remake a frozen dataclass with ``__slots__`` for its own fields (what ``dataclass(slots=True)``
    does on Python 3.10+): no ``__dict__`` per object, faster attributes. Defaults live on in
    the generated ``__init__``."""
    inherited: Set[str] = set()
    for base in cls.__mro__[1:]:
        inherited.update(getattr(base, "__slots__", ()))
    own = tuple(f.name for f in dataclasses.fields(cls) if f.name not in inherited)  # type: ignore[arg-type]
    body = dict(cls.__dict__)
    for name in own:
        body.pop(name, None)
    body.pop("__dict__", None)
    body.pop("__weakref__", None)
    body["__slots__"] = own
    # The dataclass's own frozen __setattr__ names the old class in super(): replace it.
    body["__setattr__"] = _frozen_setattr
    body["__delattr__"] = _frozen_delattr
    maker: Any = type(cls)
    new: Type[T] = maker(cls.__name__, cls.__bases__, body)
    new.__qualname__ = cls.__qualname__
    return new


def _maker(cls: Type[T]) -> Callable[..., T]:
    """A function that builds a ``cls`` from all its field values in order, as ``cls(*values)``
    does but through the slots' own setters (about half the time of the frozen ``__init__``,
    which calls ``object.__setattr__`` per field): for the decoders' hot paths."""
    setters: Dict[str, Any] = {}
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    for i, name in enumerate(names):
        slot = next(base.__dict__[name] for base in cls.__mro__ if name in base.__dict__)
        setters[f"_set{i}"] = slot.__set__
    args = ", ".join(f"v{i}" for i in range(len(names)))
    body = "".join(f"    _set{i}(obj, v{i})\n" for i in range(len(names)))
    source = f"def make({args}):\n    obj = _new(_cls)\n{body}    return obj\n"
    space: Dict[str, Any] = {"_new": object.__new__, "_cls": cls, **setters}
    exec(source, space)  # (the way dataclasses makes __init__)
    make: Callable[..., T] = space["make"]
    make.__qualname__ = f"{cls.__qualname__}._make"
    return make


def _json_text(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


class _Value:
    """Shared JSON methods: ``to_json`` gives compact text, ``from_json`` checks fields,
    ``schema()`` gives a marshmallow schema."""

    __slots__ = ()

    def to_dict(self, encode_json: bool = False) -> Dict[str, Any]:  # pragma: no cover - overridden
        """Return the value as its camelCase JSON object."""
        raise NotImplementedError

    @classmethod
    def schema(cls, **options: Any) -> Any:
        """A marshmallow schema of this type with camelCase keys, made by dataclasses-json
        (imported now, on first use): ``dump`` gives the same object as :meth:`to_dict`,
        ``load`` builds the value. Takes marshmallow's ``Schema`` options (``only``,
        ``exclude``, ``many``, ``partial``, ...) and ``infer_missing``."""
        from ._schema import schema_of

        return schema_of(cls, _Value, _JSON_VALUE_OPTIONS, **options)

    def __getstate__(self) -> List[Any]:
        """Pickle support for the slotted, frozen dataclasses: their field values in order."""
        return [getattr(self, f.name) for f in dataclasses.fields(self)]  # type: ignore[arg-type]

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, dict):  # pickled by a release without slots: its __dict__
            for f in dataclasses.fields(self):  # type: ignore[arg-type]
                if f.name in state:
                    object.__setattr__(self, f.name, state[f.name])
            return
        for f, value in zip(dataclasses.fields(self), state):  # type: ignore[arg-type]
            object.__setattr__(self, f.name, value)

    def to_json(self, **_: Any) -> str:
        """Return the value as compact camelCase JSON text."""
        return _json_text(self.to_dict())

    @classmethod
    def from_json(cls: Type[T], s: Any, **_: Any) -> T:
        """Parse JSON text and check every field.

        Raises:
            ProtocolError: not JSON, or a field is missing or of the wrong type.
        """
        try:
            value = json.loads(s)
        except (TypeError, ValueError) as exc:
            raise ProtocolError(f"{cls.__name__}: not JSON: {exc}") from None
        except RecursionError:
            raise ProtocolError(f"{cls.__name__}: nested too deeply") from None
        return cls.from_dict(value)  # type: ignore[attr-defined, no-any-return]


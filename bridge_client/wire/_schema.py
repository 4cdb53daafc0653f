"""Marshmallow schemas of the wire values, made by dataclasses-json: imported only when a
schema is asked for (``SessionState.schema()``, ``TextDelta.schema()``, ...), so that neither
the bridge nor a host that only reads turns loads dataclasses-json and marshmallow.

The caller passes the values' base class and their JSON-value field options (rather than this
module importing them), so that the import arrow points one way: :mod:`.slotted` imports this
module, on first use, never the reverse.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Type

from dataclasses_json import LetterCase, config
from dataclasses_json.mm import build_schema
from marshmallow import fields as mm_fields

__all__ = ["schema_of"]


def _prepare(base: Type[Any], json_value_options: Dict[str, Any]) -> None:
    # What the classes would carry as class attributes with dataclasses-json's mixin.
    if "dataclass_json_config" not in base.__dict__:
        base.dataclass_json_config = config(letter_case=LetterCase.CAMEL)["dataclasses_json"]
    json_value_options.setdefault("mm_field", mm_fields.Raw(allow_none=True))


def schema_of(
    cls: Type[Any],
    base: Type[Any],
    json_value_options: Dict[str, Any],
    *,
    infer_missing: bool = False,
    only: Any = None,
    exclude: Any = (),
    many: bool = False,
    context: Any = None,
    load_only: Any = (),
    dump_only: Any = (),
    partial: bool = False,
    unknown: Optional[str] = None,
) -> Any:
    """The schema of ``cls`` (a wire value class deriving from ``base``), as
    ``DataClassJsonMixin.schema`` builds it; ``json_value_options`` is the dataclasses-json
    metadata of fields that hold any JSON value (filled in with marshmallow's ``Raw``)."""
    _prepare(base, json_value_options)
    schema_class = build_schema(cls, base, infer_missing, partial)
    return schema_class(
        only=only,
        exclude=exclude,
        many=many,
        context=context,
        load_only=load_only,
        dump_only=dump_only,
        partial=partial,
        unknown=unknown,
    )

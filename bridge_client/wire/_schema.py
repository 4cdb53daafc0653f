"""Marshmallow schemas of the wire values, made by dataclasses-json: imported only when a
schema is asked for (``SessionState.schema()``, ``TextDelta.schema()``, ...), so that neither
the bridge nor a host that only reads turns loads dataclasses-json and marshmallow."""
from __future__ import annotations

from typing import Any, Optional, Type

from dataclasses_json import LetterCase, config
from dataclasses_json.mm import build_schema
from marshmallow import fields as mm_fields

from . import parts

__all__ = ["schema_of"]

# What the classes would carry as class attributes with dataclasses-json's mixin.
parts._Value.dataclass_json_config = config(letter_case=LetterCase.CAMEL)["dataclasses_json"]  # type: ignore[attr-defined]
parts._JSON_VALUE_OPTIONS.setdefault("mm_field", mm_fields.Raw(allow_none=True))


def schema_of(
    cls: Type[Any],
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
    """The schema of ``cls`` (a wire value class), as ``DataClassJsonMixin.schema`` builds it."""
    schema_class = build_schema(cls, parts._Value, infer_missing, partial)
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

"""The base of every request body and run-plan record, and the value sets shared by its groups.

Every request body (:class:`RequestModel`) refuses unknown fields (``extra="forbid"``) and is
strict about types (``"16"`` is not a rank, ``true`` not a number), except that a whole-number
decimal is the integer it spells (``16.0`` is rank 16): JSON, and so the OpenAPI document's
``type: integer`` (JSON Schema 2020-12 §6.1.1), makes no difference between them (issue 48
item 9). Every model of :mod:`akka_optimize.plan.schema.run` derives from :class:`_Group`, which
also refuses infinities and NaN.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, model_validator

from ...refs import NAME_PATTERN, REF_PATTERN

#: Largest magnitude of a decimal read as an integer: every whole number up to 2^53 has one
#: float, so ``9007199254740992.0`` is exact and no larger decimal is taken as a whole number.
WHOLE_DECIMAL_LIMIT = 2**53


def _takes_integers(annotation: Any) -> bool:
    """Whether a field of ``annotation`` takes integers and not fractions (``int``,
    ``int | None``)."""
    union = get_origin(annotation) in (Union, types.UnionType)
    options = get_args(annotation) if union else (annotation,)
    return int in options and float not in options


def whole_decimal(annotation: Any, value: Any) -> Any:
    """``value`` as an ``int`` when it is a whole-number ``float`` within
    :data:`WHOLE_DECIMAL_LIMIT` and ``annotation`` takes integers; otherwise ``value`` as it is
    (a fraction, a string or a boolean is then refused by the strict type check, naming the
    field)."""
    if (
        isinstance(value, float)
        and value.is_integer()
        and abs(value) <= WHOLE_DECIMAL_LIMIT
        and _takes_integers(annotation)
    ):
        return int(value)
    return value


def documented(pattern: str, *, required: bool = False) -> Callable[[dict[str, Any]], None]:
    """A ``json_schema_extra`` that gives a string field's JSON schema ``pattern`` (the
    field's grammar, for the OpenAPI document; the service refuses with its own sentence), and
    with ``required`` drops its null (a field the service requires though its model lets it
    be left out, to say so in its own words)."""

    def extra(schema: dict[str, Any]) -> None:
        if required:
            schema.pop("anyOf", None)
            schema.pop("default", None)
            schema["type"] = "string"
        for option in schema.get("anyOf", [schema]):
            if option.get("type") == "string":
                option["pattern"] = pattern

    return extra


#: A registry reference, or in a pipeline ``stage:NAME`` of an earlier stage.
REFERENCE = "(" + REF_PATTERN + ")|(^stage:" + NAME_PATTERN[1:] + ")"


class RequestModel(BaseModel):
    """Base of every request body: unknown fields refused, types strict, a whole-number
    decimal taken as its integer (module docstring)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _whole_decimals(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        fields = {f.alias or name: f for name, f in cls.model_fields.items()}
        return {
            k: whole_decimal(fields[k].annotation, v) if k in fields else v for k, v in data.items()
        }


class Group(RequestModel):
    """Base of every plan record: unknown fields refused, types strict."""

    model_config = ConfigDict(
        extra="forbid", strict=True, populate_by_name=False, allow_inf_nan=False
    )


SchedulerKind = Literal["constant", "linear", "cosine"]
Precision = Literal["fp32", "bf16"]
AttentionImplementation = Literal["sdpa", "eager", "flash_attention_2", "flex_attention"]

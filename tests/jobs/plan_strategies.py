"""Hypothesis strategies built from the run plan's pydantic models (issue 47, "Tests that
look for the next break"): every field of a group whose values can be drawn without naming
something stored (booleans, literals, bounded numbers) gets the values its annotation and
constraints allow, and is present or left out at random. Strings (names, references) are
left to the test, which fills them with what it registered."""

from __future__ import annotations

import types
import typing
from typing import Any

import annotated_types as at
from hypothesis import strategies as st
from pydantic import BaseModel


def _bounds(metadata: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in metadata:
        if isinstance(m, at.Ge):
            out["min_value"] = m.ge
        elif isinstance(m, at.Gt):
            out["min_value"], out["exclude_min"] = m.gt, True
        elif isinstance(m, at.Le):
            out["max_value"] = m.le
        elif isinstance(m, at.Lt):
            out["max_value"], out["exclude_max"] = m.lt, True
    return out


def _value(annotation: Any, metadata: list[Any]) -> st.SearchStrategy | None:
    """A strategy for one field's value, or None for a field this module leaves out."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return _value(inner[0], metadata) if len(inner) == 1 else None
    if typing.get_origin(annotation) is typing.Literal:
        return st.sampled_from(args)
    if annotation is bool:
        return st.booleans()
    if annotation is int:
        b = {k: v for k, v in _bounds(metadata).items() if not k.startswith("exclude")}
        lo, hi = b.get("min_value", 0), b.get("max_value", 2**31)
        # small values most of the time, the limits too (where refusals live)
        return st.one_of(st.integers(lo, min(hi, lo + 8)), st.sampled_from([lo, hi]))
    if annotation is float:
        b = _bounds(metadata)
        return st.floats(allow_nan=False, allow_infinity=False, **b)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return model_values(annotation)
    return None  # strings and free-form dicts: named by the test


def model_values(model: type[BaseModel], skip: frozenset[str] = frozenset()) -> st.SearchStrategy:
    """Dicts of ``model``'s fields by their aliases, each present or absent, with values
    drawn from the field's annotation and constraints (:func:`_value`)."""
    optional: dict[str, st.SearchStrategy] = {}
    for name, field in model.model_fields.items():
        key = field.alias or name
        if key in skip:
            continue
        value = _value(field.annotation, list(field.metadata))
        if value is not None:
            optional[key] = value
    return st.fixed_dictionaries({}, optional=optional)

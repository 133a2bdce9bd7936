"""Checking an answer against its documented schema, strictly (issue 14 item 9).

:func:`strict` adds ``additionalProperties: false`` to every object schema that lists
properties and says nothing of other keys (the models of open bodies, such as OpenAI's,
say ``true``), so a key the document does not name fails like a wrong type.
:func:`assert_matches` validates a view a function built against the response model the
service documents for it, for the records a test over HTTP does not produce.
"""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator
from pydantic import BaseModel


def strict(node: Any) -> Any:
    """``node`` (a JSON Schema or part of one) with other keys refused where it lists
    properties and says nothing of others."""
    if isinstance(node, dict):
        out = {k: strict(v) for k, v in node.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [strict(v) for v in node]
    return node


def schema_errors(schema: dict[str, Any], body: Any) -> list[str]:
    """Every way ``body`` breaks ``schema`` (already strict), as ``path: message``."""
    errors = sorted(
        Draft202012Validator(schema).iter_errors(body), key=lambda e: list(e.absolute_path)
    )
    return [f"{'.'.join(map(str, e.absolute_path)) or '(body)'}: {e.message[:300]}" for e in errors]


def assert_matches(model: type[BaseModel], body: Any) -> None:
    """Fail naming each place where ``body`` breaks ``model``'s schema, strictly."""
    schema = strict(model.model_json_schema(mode="serialization"))
    errors = schema_errors(schema, body)
    assert not errors, f"the {model.__name__} breaks its schema:\n" + "\n".join(errors[:8])

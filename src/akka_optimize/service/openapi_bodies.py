"""The request bodies of the routes that read their JSON by hand, as the OpenAPI document
gives them (issue 48 item 9: a body the document calls valid is not refused for its shape).

Each route checks its body itself (:mod:`.recipe_runs`, :mod:`.routers.run_records`,
:mod:`.routers.data`, :mod:`.inputs`); the schemas here say the same rules where JSON Schema
can: the fields each takes (``additionalProperties: false`` where unknown fields are refused),
the required ones, types, bounds and enums. Free JSON (annotations, a recipe, an OpenAI
request, a worker event's extra keys) is :data:`JSON_VALUE`: any JSON whose whole numbers fit
the signed 64-bit integers the store holds (:data:`akka_optimize.jsonvalues.MAX_INT`; the
service refuses larger ones, naming the field). What JSON Schema cannot say (one field read
against another, a recipe's or a row's content) is said in the operation's description.
"""

from __future__ import annotations

from typing import Any

from ..core.inputs import EVENT_COUNTS, known_event_types
from ..jsonvalues import MAX_INT
from ..refs import MAX_NAME_LENGTH, NAME_PATTERN, REF_PATTERN

_VALUE = {"$ref": "#/components/schemas/JsonValue"}
_OBJECT = {"$ref": "#/components/schemas/JsonObject"}
_NAME = {"type": "string", "pattern": NAME_PATTERN, "minLength": 1, "maxLength": MAX_NAME_LENGTH}
_TEXT = {"type": "string", "minLength": 1}
_COUNT = {"type": "integer", "minimum": 0, "maximum": MAX_INT}
_LOSS = {"$ref": "#/components/schemas/LossGroup"}

#: Component schemas of free JSON, by name.
JSON_SCHEMAS: dict[str, dict[str, Any]] = {
    "JsonValue": {
        "description": "Any JSON value whose numbers lie within ±(2^63-1), the store's "
        "whole numbers (a larger number is refused naming its field).",
        "anyOf": [
            {"type": ["string", "boolean", "null"]},
            {"type": "number", "minimum": -MAX_INT, "maximum": MAX_INT},
            {"type": "array", "items": _VALUE},
            {"type": "object", "additionalProperties": _VALUE},
        ],
    },
    "JsonObject": {
        "description": "A JSON object of JsonValue values.",
        "type": "object",
        "additionalProperties": _VALUE,
    },
}


def stored_values(schemas: dict[str, Any]) -> None:
    """Add :data:`JSON_SCHEMAS` to ``schemas``, make every free-form object's values
    (``additionalProperties: true``, pydantic's ``dict[str, Any]``) :data:`JSON_VALUE`, and
    bound every integer without a bound of its own to the store's ±(2^63-1)."""
    todo: list[Any] = list(schemas.values())
    while todo:
        node = todo.pop()
        if isinstance(node, dict):
            if node.get("additionalProperties") is True:
                node["additionalProperties"] = _VALUE
            if node.get("type") == "integer":
                node.setdefault("maximum", MAX_INT)
                if "exclusiveMinimum" not in node:
                    node.setdefault("minimum", -MAX_INT)
            todo.extend(node.values())
        elif isinstance(node, list):
            todo.extend(node)
    schemas.update(JSON_SCHEMAS)


def _json(schema: dict[str, Any], *, required: bool = True) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}, "required": required}


def _closed(properties: dict[str, Any], *required: str, **more: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
        **more,
    }


def _sweep() -> dict[str, Any]:
    grid = {
        "anyOf": [
            {
                "type": "object",
                "minProperties": 1,
                "additionalProperties": {"type": "array", "minItems": 1, "items": _VALUE},
            },
            {
                "type": "array",
                "minItems": 1,
                "items": {"type": "object", "minProperties": 1, "additionalProperties": _VALUE},
            },
        ]
    }
    return _closed(
        {
            "snapshot": {**_TEXT, "description": "The source snapshot, step-N or N."},
            "steps": {**_COUNT, "minimum": 1, "description": "Updates each branch trains."},
            "grid": {
                **grid,
                "description": "Plan paths to lists of values, or a list of "
                "points (objects of plan paths to values).",
            },  # fmt: skip
            "dataset": {**_TEXT, "description": "Each branch's dataset (registry reference)."},
            "compare": {"type": "boolean", "description": "Also compare every branch."},
            "grader": {**_TEXT, "description": "The comparison's grader."},
            "graderInstructions": {"type": ["string", "null"]},
            "sampling": {"$ref": "#/components/schemas/Sampling"},
        },
        "snapshot",
        "steps",
        "grid",
    )


def _event() -> dict[str, Any]:

    counts = {k: {**_COUNT, "description": "A whole number."} for k in EVENT_COUNTS}
    return {
        "type": "object",
        "properties": {"type": {"enum": list(known_event_types())}, **counts},
        "required": ["type"],
        "additionalProperties": _VALUE,
        "if": {"properties": {"type": {"const": "save"}}},
        "then": {"required": ["step"]},
    }


def _preview() -> dict[str, Any]:
    from .routers.data import MAX_PREVIEW_ROWS  # lazy: torch

    return _closed(
        {
            "baseModel": {**_TEXT, "description": "The base model whose template renders."},
            "plan": {
                "type": "object",
                "properties": {
                    "baseModel": _TEXT,
                    "config": {
                        "type": "object",
                        "properties": {"loss": _LOSS},
                        "additionalProperties": _VALUE,
                    },
                },
                "additionalProperties": _VALUE,
                "description": "A run plan: its baseModel and config.loss.",
            },
            "loss": {**_LOSS, "description": "The loss policy (a plan's config.loss)."},
            "jsonl": {"type": "string", "description": "The text of a JSONL file."},
            "filename": {"type": "string", "description": "The JSONL text's file name."},
            "rows": {"type": "array", "items": _OBJECT, "minItems": 1, "description": "Rows."},
            "dataset": {**_TEXT, "pattern": REF_PATTERN, "description": "A dataset reference."},
            "project": {
                "anyOf": [_NAME, {"type": "null"}],
                "description": "Resolves a bare NAME.",
            },
            "rowCount": {"type": "integer", "minimum": 1, "maximum": MAX_PREVIEW_ROWS},
        },
        "baseModel",
        oneOf=[{"required": [k]} for k in ("jsonl", "rows", "dataset")],
    )


def _claim() -> dict[str, Any]:
    from ..core.recipes.runs import ADVERT_KEYS, MAX_WAIT_S  # lazy: sqlalchemy

    advert = {
        "type": "object",
        "properties": {k: {"type": "string"} for k in ADVERT_KEYS},
        "required": list(ADVERT_KEYS),
        "additionalProperties": _VALUE,
    }
    return _closed(
        {
            "accepts": {"type": "array", "minItems": 1, "items": advert},
            "wait": {"type": "number", "minimum": 0, "maximum": MAX_WAIT_S},
            "worker": {"type": ["string", "null"]},
        },
        "accepts",
    )


def hand_read_bodies() -> dict[tuple[str, str], dict[str, Any]]:
    """The request bodies of the routes that read their JSON by hand, by (method, path)."""
    endpoint = "/v1/training/endpoints/{endpoint_id}/openai/v1"
    attempt = "/v1/training/runs/{run_id}/attempts/{number}"
    optional_name = {"anyOf": [_NAME, {"type": "null"}]}
    return {
        ("post", "/v1/training/data/preview"): _json(_preview()),
        ("post", "/v1/training/recipes"): _json(
            _closed({"project": _NAME, "recipe": _OBJECT}, "project", "recipe")
        ),
        ("post", "/v1/training/recipes/claim"): _json(_claim()),
        ("post", f"{endpoint}/chat/completions"): _json(_OBJECT),
        ("post", f"{endpoint}/completions"): _json(_OBJECT),
        ("post", f"{attempt}/judge/chat/completions"): _json(_OBJECT),
        ("post", f"{attempt}/events"): _json(_event()),
        ("post", "/v1/training/runs/{run_id}/sweep"): _json(_sweep()),
        ("post", "/v1/training/runs/{run_id}/snapshots/{name}/register"): _json(
            _closed({"modelName": optional_name}), required=False
        ),
        ("post", "/v1/training/runs/{run_id}/resume"): _json(
            _closed({"step": {"anyOf": [_COUNT, {"type": "null"}]}}), required=False
        ),
    }

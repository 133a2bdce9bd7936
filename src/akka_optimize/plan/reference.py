"""The plan reference: the JSON schema of a run descriptor with descriptions, per-loop
defaults and bounds (``akka-optimize config-schema``).

The schema is generated from :mod:`akka_optimize.plan.schema.run` (so it cannot drift from
what the service accepts), with references inlined so each field sits at its own path,
``default`` set to the supervised default (``x-defaults`` holds ``{"sft", "rl"}`` where
the loops differ) and ``config.engineSettings`` listing every declared key.
"""

from __future__ import annotations

import copy
from typing import Any

from .. import engine_settings
from . import defaults as D
from . import pipeline as P
from .schema.run import RunPlan

_LOOP_DEFAULTS: dict[str, dict[str, Any]] = {
    "config.hyperparams": D.hyperparams("sft"),
    "config.rlHyperparams": D.hyperparams("rl"),
    "config.dpoHyperparams": D.hyperparams("dpo"),
    "config.model": {
        **D.model("cpu", "fp32"),
        "precision": "fp32 on cpu, bf16 on cuda",
        "gradientCheckpointing": "false on cpu, true on cuda",
    },
    "config.data": D.DATA,
    "config.loss": D.LOSS,
    "execution": {**D.EXECUTION, "deviceProfile": "the deployment's default"},
    "config": {"maxSeqLength": D.MAX_SEQ_LENGTH},
}


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        if "$ref" in node:
            target = copy.deepcopy(defs[node["$ref"].rsplit("/", 1)[-1]])
            rest = {k: v for k, v in node.items() if k != "$ref"}
            return _inline({**target, **rest}, defs)
        return {k: _inline(v, defs) for k, v in node.items() if k != "$defs"}
    if isinstance(node, list):
        return [_inline(x, defs) for x in node]
    return node


def _object_of(node: dict[str, Any]) -> dict[str, Any] | None:
    """The object schema of a property (``anyOf: [object, null]`` unwrapped)."""
    if "properties" in node:
        return node
    for alt in node.get("anyOf", []):
        if isinstance(alt, dict) and "properties" in alt:
            return alt
    return None


def _set_defaults(node: dict[str, Any], path: str) -> None:
    obj = _object_of(node)
    if obj is None:
        return
    for name, prop in obj["properties"].items():
        sub = f"{path}.{name}" if path else name
        d = _lookup_default(sub)
        if d is not _MISSING:
            prop["default"] = d
        _set_defaults(prop, sub)


_MISSING = object()


def _lookup_default(path: str) -> Any:
    for base, table in _LOOP_DEFAULTS.items():
        if not path.startswith(base + "."):
            continue
        node: Any = table
        for part in path[len(base) + 1 :].split("."):
            if not isinstance(node, dict) or part not in node:
                node = _MISSING
                break
            node = node[part]
        if node is not _MISSING and not isinstance(node, dict):
            return node
    return _MISSING


def plan_json_schema() -> dict[str, Any]:
    """The whole run-descriptor schema (JSON Schema 2020-12), references inlined."""
    raw = RunPlan.model_json_schema()
    schema = _inline(raw, raw.get("$defs", {}))
    _set_defaults(schema, "")
    cfg = _object_of(schema["properties"]["config"])
    assert cfg is not None
    cfg["properties"]["engineSettings"] = engine_settings.schema()
    schema["description"] = (
        "A run descriptor. A field left out (or null) takes the default of the loop that "
        "runs: `default` is the supervised default; config.rlHyperparams shows the "
        "reinforcement defaults. Unknown fields are refused."
    )
    return schema


KINDS = ("run", "pipeline", "curation", "evaluation")
"""What ``config-schema --kind`` documents: the run descriptor, the pipeline descriptor
(its curate, train and evaluate stages), and the bodies of ``training curations start``
and ``training evaluations start``."""


def descriptor_schema(kind: str = "run") -> dict[str, Any]:
    """The JSON schema of one of :data:`KINDS`, references inlined.

    Raises:
        KeyError: ``kind`` is not one of :data:`KINDS`.
    """

    if kind == "run":
        return plan_json_schema()
    model = {"pipeline": P.PipelinePlan, "curation": P.CurationRequest,
             "evaluation": P.EvaluationRequest}.get(kind)  # fmt: skip
    if model is None:
        raise KeyError(f"--kind {kind!r}: the kinds are {', '.join(KINDS)}")
    raw = model.model_json_schema()
    schema = _inline(raw, raw.get("$defs", {}))
    schema["description"] = " ".join((model.__doc__ or "").split())
    return schema


def field_schema(field: str, kind: str = "run") -> dict[str, Any]:
    """The schema of one dotted field (``config.hyperparams.lora.rank``,
    ``config.engineSettings.head.chunk_tokens``) of a descriptor of ``kind``.

    Raises:
        KeyError: no such field; the message names the fields at the deepest level found.
    """
    node: dict[str, Any] = descriptor_schema(kind)
    parts = field.split(".") if field else []
    walked: list[str] = []
    while parts:
        obj = _object_of(node)
        props = obj["properties"] if obj else {}
        if walked == ["config", "engineSettings"]:
            key = ".".join(parts)
            if key in props:
                return props[key]
            raise KeyError(
                f"{field}: no engine setting {key!r}; the settings are: {', '.join(props)}"
            )
        part = parts.pop(0)
        if part not in props:
            where = ".".join(walked) or "the plan"
            raise KeyError(
                f"{field}: {where} has no field {part!r}; its fields are: {', '.join(props)}"
            )
        node = props[part]
        walked.append(part)
    return node

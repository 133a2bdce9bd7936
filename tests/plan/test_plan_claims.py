"""README "The run plan": every plan field is typed and documented, and the
configuration hash covers every field a run trained under (seeds/000 "Training
parameters"), proved by walking the whole schema and the whole resolved plan."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from plan_fakes import FULL_SFT_PLAN, FakeEnv, load_cases

from akka_optimize.plan import resolve_plan
from akka_optimize.plan.hashing import config_hash
from akka_optimize.plan.reference import plan_json_schema

MINIMAL = load_cases("plans.jsonl")[0]["plan"]
BOUNDS = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "enum", "const"}
BOUNDS_TEXT = {"maxLength", "pattern", "enum", "const"}


def _object(node: dict[str, Any]) -> dict[str, Any] | None:
    if "properties" in node:
        return node
    return next((a for a in node.get("anyOf", []) if "properties" in a), None)


def _fields(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict, bool]]:
    """Every leaf field of the schema: (dotted path, its schema, whether it is required)."""
    obj = _object(node)
    assert obj is not None
    required = set(obj.get("required", []))
    for name, sub in obj["properties"].items():
        full = f"{path}.{name}" if path else name
        if _object(sub) is not None:
            yield from _fields(sub, full)
        else:
            yield full, sub, name in required


SCHEMA_FIELDS = list(_fields(plan_json_schema()))


def test_the_walk_reaches_every_group_of_the_plan() -> None:
    paths = {p for p, _, _ in SCHEMA_FIELDS}
    assert len(paths) > 80
    for field in (
        "config.hyperparams.lora.rank",
        "config.hyperparams.training.seed",
        "config.rlHyperparams.optimizer.learningRate",
        "config.model.weightPrecision",
        "config.data.onTooLong",
        "config.loss.trainOnToolCalls",
        "config.engineSettings.head.chunk_tokens",
        "execution.keepRecoverable",
        "branchFrom.snapshot",
    ):
        assert field in paths, field


@pytest.mark.parametrize(("path", "schema", "required"), SCHEMA_FIELDS, ids=lambda x: str(x))
def test_every_plan_field_is_typed_and_documented(path: str, schema: dict, required: bool) -> None:
    """A description, a type, a default (unless the plan must state it) and, for a
    number or a text, its bounds or allowed values (README: `config-schema`)."""
    assert len(schema.get("description") or "") > 10, f"{path} has no description"
    alts = [a for a in schema.get("anyOf", [schema]) if a.get("type") != "null"]
    assert alts and all(a.get("type") for a in alts), f"{path} has no type: {schema}"
    assert required or "default" in schema, f"{path} has no default"
    for alt in alts:
        if alt["type"] in ("integer", "number"):
            assert BOUNDS & set(alt), f"{path} ({alt['type']}) has no bounds: {alt}"
        if alt["type"] == "string":
            assert BOUNDS_TEXT & set(alt), f"{path} (text) has no bounds: {alt}"


def _leaves(value: Any, path: tuple = ()) -> Iterator[tuple]:
    if isinstance(value, dict) and value:
        for k, v in value.items():
            yield from _leaves(v, (*path, k))
    else:
        yield path


def _changed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, list):
        return [*value, "x"]
    return "set"  # None or an empty object


def _set(plan: dict, path: tuple, value: Any) -> dict:
    out = copy.deepcopy(plan)
    node = out
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return out


NOT_HASHED = {
    ("project",),
    ("modelName",),
    ("submissionId",),
    ("kind",),
    ("execution", "deviceProfile"),
    ("execution", "hostMemoryGiB"),
    ("execution", "keepRecoverable"),
    ("execution", "keepAdapters"),
    ("execution", "saveEverySteps"),
    ("execution", "saveEachEpoch"),
}
"""Where a result is filed and which machine runs it (hashing.py's docstring)."""


@pytest.mark.parametrize("plan", [MINIMAL, FULL_SFT_PLAN], ids=["minimal", "full-sft"])
def test_the_configuration_hash_covers_every_field_a_run_trains_under(plan: dict) -> None:
    """Every leaf of the resolved plan, changed alone, changes the hash, except the few
    documented as where a result is filed or which machine runs it."""
    resolved = resolve_plan(plan, FakeEnv()).plan
    base = config_hash(resolved)
    leaves = list(_leaves(resolved))
    assert len(leaves) > 50
    assert all(len(p) < 2 or p[0] != "config" for p in NOT_HASHED)
    for path in leaves:
        value = _changed(_get(resolved, path))
        same = config_hash(_set(resolved, path, value)) == base
        assert same is (path in NOT_HASHED), (".".join(path), "hash unchanged" if same else "")
    # Every field the schema declares under config reaches the resolved plan (and so the
    # hash): the resolver drops no field a run trains under.
    resolved_paths = {".".join(p) for p in leaves}
    for field, _, _ in SCHEMA_FIELDS:
        if field.startswith("config.") and not field.startswith("config.engineSettings."):
            prefix = field.rsplit(".", 1)[0]
            assert field in resolved_paths or not any(
                r.startswith(prefix + ".") for r in resolved_paths
            ), field


def _get(plan: dict, path: tuple) -> Any:
    node: Any = plan
    for k in path:
        node = node[k]
    return node

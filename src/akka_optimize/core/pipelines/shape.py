"""A pipeline descriptor's form (:mod:`akka_optimize.core.pipelines.records`): its fields,
its stages' kinds and names, and the ``stage:NAME`` references between stages.

Everything here reads the descriptor only; nothing touches the store.
"""

from __future__ import annotations

import copy
from typing import Any

from ...errors import AkkaError, InvalidRequest
from ...plan.pipeline import PipelinePlan, stage_fields
from ...refs import validate_name

STAGE_KINDS = ("curate", "train", "evaluate")
"""The kinds of stage a pipeline holds."""

MAX_STAGES = 16
"""Most stages one pipeline holds."""

TOP_FIELDS = tuple(PipelinePlan.model_fields)
"""The fields of a pipeline descriptor."""

REF_PREFIX = "stage:"
"""``stage:NAME`` names an earlier stage's output."""

_REF_SLOTS: dict[str, list[tuple[tuple[str, ...], str]]] = {
    "curate": [(("source",), "dataset")],
    "train": [(("config", "dataset"), "dataset"), (("config", "validationDataset"), "dataset")],
    "evaluate": [(("modelId",), "model"), (("dataset",), "dataset")],
}
"""Where each kind of stage may name an earlier output, and which kind of output."""

_OUTPUT = {"curate": "dataset", "train": "model", "evaluate": None}


def _refuse(message: str, field: str, code: str | None = None) -> InvalidRequest:
    return InvalidRequest(message, field=field, code=code or "pipeline_refused")


def in_stage(exc: AkkaError, i: int, name: str) -> AkkaError:
    """``exc`` as stage ``i``'s refusal: message prefixed ``stages[i] (name):``, field
    ``stages[i].FIELD``, the same class, code and status."""
    where = f"stages[{i}]"
    field = f"{where}.{exc.field}" if exc.field else where
    details = exc.details
    if isinstance(details, list):
        details = [
            {**d, "field": f"{where}.{d['field']}" if d.get("field") else where}
            if isinstance(d, dict)
            else d
            for d in details
        ]
    out = type(exc).__new__(type(exc))
    AkkaError.__init__(
        out,
        f"{where} ({name}): {exc.message}",
        code=exc.code,
        field=field,
        status=exc.status,
        details=details,
    )
    return out


def _get(d: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(d, dict):
            return None
        d = d.get(key)  # type: ignore[assignment]
    return d


def _set(d: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        d = d[key]
    d[path[-1]] = value


def shape(raw: Any) -> tuple[str, list[dict[str, Any]], str | None]:
    """The descriptor's project, stages (with their names filled) and submissionId.

    Raises:
        InvalidRequest: the field named: not an object, ``kind`` not ``pipeline``, an
            unknown field, no ``project``, ``stages`` not a non-empty list of objects,
            a stage kind that does not exist, a field its kind does not take, a duplicate
            name.
    """
    if not isinstance(raw, dict):
        raise _refuse("A pipeline descriptor is a JSON object.", "body")
    if raw.get("kind") != "pipeline":
        raise _refuse(
            f'kind {raw.get("kind")!r}: a pipeline descriptor has "kind": "pipeline".', "kind"
        )
    for key in raw:
        if key not in TOP_FIELDS:
            raise _refuse(
                f"{key}: not a pipeline field (the fields are: {', '.join(TOP_FIELDS)}).", key
            )
    project = raw.get("project")
    if not isinstance(project, str) or not project.strip():
        raise _refuse("project: required; the training project the pipeline runs in.", "project")
    sub = raw.get("submissionId")
    if sub is not None and (not isinstance(sub, str) or not 1 <= len(sub) <= 128):
        raise _refuse("submissionId: a string of 1 to 128 characters.", "submissionId")
    stages = raw.get("stages")
    if not isinstance(stages, list) or not stages:
        raise _refuse("stages: required, a list of curate, train and evaluate stages.", "stages")
    if len(stages) > MAX_STAGES:
        raise _refuse(
            f"stages: {len(stages)} stages; a pipeline holds at most {MAX_STAGES}.", "stages"
        )
    out: list[dict[str, Any]] = []
    names: set[str] = set()
    for i, st in enumerate(stages):
        where = f"stages[{i}]"
        if not isinstance(st, dict):
            raise _refuse(f"{where}: a stage is an object with a kind.", where)
        kind = st.get("kind")
        if kind not in STAGE_KINDS:
            raise _refuse(
                f"{where}.kind {kind!r}: a stage is one of {', '.join(STAGE_KINDS)}.",
                f"{where}.kind",
            )
        for key in st:
            if key not in stage_fields(kind):
                raise _refuse(
                    f"{where} ({kind}): {key} is not a field of a {kind} stage (its fields: "
                    f"{', '.join(stage_fields(kind))}).",
                    f"{where}.{key}",
                )
        name = st.get("name", kind)
        validate_name(name, f"{where}.name")  # the names' rule (refs.validate_name)
        if name in names:
            raise _refuse(
                f"{where}.name {name!r}: an earlier stage has this name; give each stage a "
                "name of its own.",
                f"{where}.name",
            )
        names.add(name)
        out.append({**copy.deepcopy(st), "name": name})
    return project.strip(), out, sub


def references(stages: list[dict[str, Any]]) -> list[dict[str, tuple[str, ...]]]:
    """For each stage, ``{slot path: the earlier stage index it names}``.

    Raises:
        InvalidRequest: ``stage:NAME`` of no earlier stage, or of one whose output is not
            what the slot takes (a dataset where a model goes).
    """
    index = {st["name"]: i for i, st in enumerate(stages)}
    found: list[dict[str, Any]] = []
    for i, st in enumerate(stages):
        refs: dict[tuple[str, ...], int] = {}
        for path, want in _REF_SLOTS[st["kind"]]:
            value = _get(st, path)
            if not (isinstance(value, str) and value.startswith(REF_PREFIX)):
                continue
            target = value[len(REF_PREFIX) :]
            field = f"stages[{i}].{'.'.join(path)}"
            j = index.get(target)
            if j is None or j >= i:
                raise _refuse(
                    f"{field} {value!r}: names no earlier stage (a stage may name the output of "
                    "a stage before it).",
                    field,
                )
            if _OUTPUT[stages[j]["kind"]] != want:
                got = _OUTPUT[stages[j]["kind"]] or "no output"
                raise _refuse(
                    f"{field} {value!r}: stage {target!r} ({stages[j]['kind']}) outputs "
                    f"{'a ' + got if got != 'no output' else got}, and {'.'.join(path)} takes "
                    f"a {want}.",
                    field,
                )
            refs[path] = j
        found.append(refs)
    return found


def fill(st: dict[str, Any], refs: dict[tuple[str, ...], int], values: list[Any]) -> dict:
    """A copy of stage ``st`` with each ``stage:NAME`` replaced by ``values[j]``."""
    out = copy.deepcopy(st)
    for path, j in refs.items():
        _set(out, path, values[j])
    return out

"""Refusals: every reason a plan is refused, each naming the field by its full path.

seeds/000 "Training parameters": "If the runtime does not honor a field, the trainer
refuses the plan at submission and names the field and the ceiling. A misspelled field
is refused the same way rather than ignored." A dry run reports every refusal, not only
the first (tests/cases/README.md), so rules add to a :class:`Refusals` list and
:class:`PlanRefused` carries all of them.
"""

from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from ..errors import EXCERPT_CHARS, InvalidRequest, excerpt
from .schema.run import RunPlan

OLD_SHAPES: dict[str, str] = {
    "config.hyperparams.loraRank": "config.hyperparams.lora.rank",
    "config.hyperparams.learningRate": "config.hyperparams.optimizer.learningRate",
    "config.rlHyperparams.loraRank": "config.rlHyperparams.lora.rank",
    "config.rlHyperparams.learningRate": "config.rlHyperparams.optimizer.learningRate",
    "config.precision": "config.model.precision",
    "config.attentionImplementation": "config.model.attentionImplementation",
    "precision": "config.model.precision",
    "attentionImplementation": "config.model.attentionImplementation",
    "workload": "project",
    "config.datasetHash": "config.dataset (a registry reference)",
}
"""Fields renamed by seeds/000 and seeds/001 breaking changes → their current path."""


@dataclass(frozen=True)
class Refusal:
    """One reason a plan is refused.

    Attributes:
        field: the full dotted path (``config.hyperparams.lora.rank``), or None for the
            plan as a whole.
        message: a sentence that starts with the path and names the value or ceiling.
        value: the value the plan gave (JSON), when there is one.
        limit: the ceiling, bound or allowed values, when there is one.
    """

    field: str | None
    message: str
    value: Any = None
    limit: Any = None

    def to_dict(self) -> dict[str, Any]:
        """``{field, message, value, limit}`` for the API's ``details``."""
        return asdict(self)


class Refusals:
    """An ordered list of refusals, at most one per field path."""

    def __init__(self) -> None:
        self.items: list[Refusal] = []

    def add(self, field: str | None, message: str, value: Any = None, limit: Any = None) -> None:
        """Add a refusal unless this field already has one.

        A long field path, message or value is cut to a short excerpt (a refusal never
        echoes a whole offending value; issue 14 item 3).
        """
        if field is not None and len(field) > EXCERPT_CHARS:
            field = field[:EXCERPT_CHARS] + "…"
        if field is not None and any(r.field == field for r in self.items):
            return
        if len(message) > 5 * EXCERPT_CHARS:
            message = message[: 5 * EXCERPT_CHARS] + f"… ({len(message) - 1000:,} more characters)"
        self.items.append(Refusal(field, message, _short(_jsonable(value)), _jsonable(limit)))

    def has(self, prefix: str) -> bool:
        """Whether a refusal names ``prefix`` or a field below it."""
        return any(
            r.field and (r.field == prefix or r.field.startswith(prefix + ".")) for r in self.items
        )

    def __bool__(self) -> bool:
        return bool(self.items)

    def __len__(self) -> int:
        return len(self.items)


class PlanRefused(InvalidRequest):
    """400: the plan is refused. ``details`` lists every refusal ``{field, message, value,
    limit}``; ``field`` is the first refusal's path; the message names every field."""

    code = "plan_refused"

    def __init__(self, refusals: list[Refusal]) -> None:
        first = refusals[0]
        if len(refusals) == 1:
            message = first.message
        else:
            lines = " ".join(f"({i}) {r.message}" for i, r in enumerate(refusals, 1))
            message = f"The plan is refused for {len(refusals)} reasons: {lines}"
        super().__init__(message, field=first.field, details=[r.to_dict() for r in refusals])
        self.refusals = refusals


def _short(v: Any) -> Any:
    """``v``, or an excerpt string of it when its JSON is longer than ``EXCERPT_CHARS``."""
    if v is None or isinstance(v, bool | int | float):
        return v
    if isinstance(v, str):
        return v if len(v) <= EXCERPT_CHARS else excerpt(v)
    return excerpt(v) if len(repr(v)) > EXCERPT_CHARS else v


def _jsonable(v: Any) -> Any:
    if v is None or isinstance(v, bool | int | float | str):
        return v
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return repr(v)


def _path(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc)


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The plan record that holds the field at ``loc`` (for did-you-mean hints)."""
    model: type[BaseModel] | None = RunPlan
    for part in loc:
        if model is None or not isinstance(part, str) or part not in model.model_fields:
            return None
        ann = model.model_fields[part].annotation
        model = next(
            (
                a
                for a in getattr(ann, "__args__", (ann,))
                if isinstance(a, type) and issubclass(a, BaseModel)
            ),
            None,
        )
    return model


def _homes(name: str, model: type[BaseModel] = RunPlan, prefix: str = "") -> list[str]:
    """Plan paths of the records that declare a field called ``name`` (any case)."""
    out = []
    for field, info in model.model_fields.items():
        if field.lower() == name.lower():
            out.append(prefix.rstrip(".") or "the plan's top level")
        for a in getattr(info.annotation, "__args__", (info.annotation,)):
            if isinstance(a, type) and issubclass(a, BaseModel):
                out += _homes(name, a, f"{prefix}{field}.")
    return out


def _unknown_field(loc: tuple[Any, ...]) -> str:
    path = _path(loc)
    name = str(loc[-1])
    if path in OLD_SHAPES:
        return (
            f"{path} is not a field of the run plan: {path} is now {OLD_SHAPES[path]} "
            "(renamed in 0.8.0). Update the plan."
        )
    parent = _model_at(loc[:-1])
    hint = ""
    if parent is not None:
        names = list(parent.model_fields)
        close = difflib.get_close_matches(name, names, n=1, cutoff=0.6) if len(name) < 100 else []
        lower = [n for n in names if n.lower() == name.lower()]
        homes = [h for h in _homes(name) if h != _path(loc[:-1])]
        if lower or close:
            hint = f" Did you mean {(lower or close)[0]!r}?"
        elif homes:
            hint = f" {name} is a field of {' and '.join(homes)}."
        hint += f" The fields here are: {', '.join(names)}."
    return f"{path}: unknown field {excerpt(name, 80)}; a field the plan does not declare is refused.{hint}"


def _missing(loc: tuple[Any, ...]) -> str:
    path = _path(loc)
    parent = _model_at(loc[:-1])
    desc = ""
    if parent is not None and str(loc[-1]) in parent.model_fields:
        desc = parent.model_fields[str(loc[-1])].description or ""
    if path == "project":
        return (
            'project is missing: a run plan names its training project, e.g. "project": '
            '"triage" (create one with `training projects create NAME`).'
        )
    return f"{path} is missing. {desc}".strip()


def from_validation_error(exc: ValidationError, out: Refusals) -> None:
    """Turn each pydantic error of a :class:`RunPlan` validation into a refusal."""
    for e in exc.errors(include_url=False):
        loc = tuple(e.get("loc", ()))
        path = _path(loc) or None
        typ = e.get("type", "")
        value = e.get("input")
        ctx = e.get("ctx") or {}
        limit = next((ctx[k] for k in ("ge", "gt", "le", "lt", "expected") if k in ctx), None)
        if typ == "extra_forbidden":
            out.add(path, _unknown_field(loc), value)
        elif typ == "missing":
            out.add(path, _missing(loc))
        elif typ in ("model_type", "model_attributes_type", "dict_type") and loc:
            out.add(path, f"{path} must be an object, not {excerpt(value)}.", value)
        elif not loc:
            kind = type(value).__name__
            out.add(None, f"A run plan is a JSON object, not a {kind}.", None)
        else:
            shown = excerpt(value) if not isinstance(value, dict | list) else type(value).__name__
            out.add(path, f"{path}: {e.get('msg', 'invalid value')}; got {shown}.", value, limit)

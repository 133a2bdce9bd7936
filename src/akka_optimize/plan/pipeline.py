"""The pipeline descriptor and the request bodies its stages take: what ``config-schema
--kind pipeline`` (``curation``, ``evaluation``) documents and the service checks (seeds/001
"The trainer pages document every descriptor field, including kind, submissionId, smoke,
execution.engine, the pipeline descriptor's fields, the curate stage and the options of
training evaluations start"; FEATURES F022, F023, F168; issue 19).

A pipeline runs its ``stages`` in order (:mod:`akka_optimize.core.pipelines.records`): a
``curate`` stage is a curation request (:class:`CurationRequest`) without ``project``, a
``train`` stage a run descriptor (:class:`akka_optimize.plan.schema.run.RunPlan`) without
``kind``, ``project`` and ``submissionId``, an ``evaluate`` stage an evaluation request
(:class:`EvaluationRequest`) without ``project``. ``stage:NAME`` in a dataset or model
field names an earlier stage's output. The stage models here declare the fields each
kind takes; each stage's values are checked by its standalone form's own rules, so the
messages are the same.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from ..refs import GRADER_PATTERN, NAME_PATTERN, REF_PATTERN
from .schema.base import REFERENCE, RequestModel, documented
from .schema.run import BranchFrom, ExecutionGroup, RunConfig

__all__ = [
    "CurateStage",
    "CurationRequest",
    "EvaluateStage",
    "EvaluationRequest",
    "KeepRule",
    "PipelinePlan",
    "Sampling",
    "TrainStage",
    "stage_fields",
]


class Sampling(RequestModel):
    """How the answers are sampled; a setting left out takes its default (greedy, 256 tokens)."""

    temperature: float = Field(0.0, ge=0, le=2, description="0 is greedy.")
    topP: float = Field(1.0, gt=0, le=1, description="Nucleus sampling mass.")  # noqa: N815
    maxTokens: int = Field(256, ge=1, le=32768, description="Longest answer, in tokens.")  # noqa: N815
    seed: int | None = Field(0, ge=0, le=2**31 - 1, description="Sampling seed.")


class _Body(RequestModel):
    """A request body: unknown fields refused, types strict as on plans (``"1"`` is not a
    limit, ``true`` not a number; issue 48 item 6)."""


_REFERENCE = documented(REFERENCE)


class _EvaluationFields(_Body):
    modelId: str = Field(  # noqa: N815
        min_length=1,
        json_schema_extra=_REFERENCE,
        description="Registry reference of the model: a trained adapter or a base model "
        "(in a pipeline, stage:NAME of a train stage).",
    )
    dataset: str | None = Field(
        None,
        min_length=1,
        json_schema_extra=_REFERENCE,
        description="Registry reference of the dataset; each row's last assistant message (or "
        "its ground_truth) is the reference answer. Left out: the project's evaluation "
        "settings' dataset.",
    )
    grader: str | None = Field(
        None,
        min_length=1,
        json_schema_extra=documented(GRADER_PATTERN),
        description="bundle:REFERENCE#MODULE[:FUNCTION] (compute_score by default), or "
        "model:REFERENCE, a judge served on its own endpoint that scores each answer 0-10. "
        "Left out: the project's evaluation settings' grader.",
    )
    graderInstructions: str | None = Field(  # noqa: N815
        None, description="A model: judge's instructions (not read by a bundle grader)."
    )


class EvaluationRequest(_EvaluationFields):
    """``POST /v1/training/evaluations`` (``training evaluations start``)."""

    project: str | None = Field(
        None, description="Project (name or ID); a base model needs one, an adapter takes its own."
    )
    sampling: Sampling = Field(default_factory=Sampling, description="How answers are sampled.")
    limit: int | None = Field(None, ge=1, description="Evaluate only the first N rows.")


def _keep_schema(schema: dict[str, Any]) -> None:
    """The keep rule's bounds and its rule that one of the two is given (documented here;
    :func:`akka_optimize.evals.curation.request` refuses with its own sentences)."""
    given = [
        {"required": [k], "properties": {k: {"type": "number", "description": f"{k}, given."}}}
        for k in _KEEP_BOUNDS
    ]
    schema["anyOf"] = given
    for key, bounds in _KEEP_BOUNDS.items():
        field = schema["properties"][key]
        for option in field.get("anyOf", [field]):
            if option.get("type") == "number":
                option.update(bounds)


_KEEP_BOUNDS = {
    "minScore": {"minimum": 0, "maximum": 1},
    "topShare": {"exclusiveMinimum": 0, "maximum": 1},
}


class KeepRule(_Body):
    """``keep``: which scored rows a curation keeps (both rules apply when both are given;
    a row the judge could not score is never kept)."""

    model_config = ConfigDict(json_schema_extra=_keep_schema)

    minScore: float | None = Field(  # noqa: N815
        None, description="Keep rows scoring at least this (the judge's 0-10 over 10, in [0, 1])."
    )
    topShare: float | None = Field(  # noqa: N815
        None,
        description="Keep the best share of the rows, in (0, 1] (ceil(share x rows), "
        "ties by row order).",
    )


def _dataset_required(schema: dict[str, Any]) -> None:
    schema["required"] = [*schema.get("required", []), "dataset"]


class _CurationFields(_Body):
    model_config = ConfigDict(json_schema_extra=_dataset_required)  # the service requires it

    source: str = Field(
        min_length=1,
        json_schema_extra=_REFERENCE,
        description="Registry reference of the dataset to curate (in a pipeline, stage:NAME of "
        "a curate stage); each row ends with the assistant answer the judge scores.",
    )
    judge: str = Field(
        min_length=1,
        json_schema_extra=documented("^model:" + REF_PATTERN[1:]),
        description="model:REFERENCE: the judge that scores each row 0-10.",
    )
    judgeInstructions: str | None = Field(  # noqa: N815
        None,
        description="The judge's instructions; left out, its training instructions, else the "
        "built-in ones (with the source's first system message as context).",
    )
    keep: KeepRule = Field(description="Which rows are kept: minScore and/or topShare.")
    dataset: str | None = Field(
        None,
        json_schema_extra=documented(REF_PATTERN, required=True),
        description="Required: the dataset (NS/NAME) the kept rows are registered under, "
        "e.g. oasst1/curated; the judge's dataset, every row with its score and the judge's "
        "reply, goes beside it as oasst1/curated-judge.",
    )
    limit: int | None = Field(None, ge=1, description="Curate only the first N rows.")


class CurationRequest(_CurationFields):
    """``POST /v1/training/curations`` (``training curations start``)."""

    project: str = Field(min_length=1, description="The project (name or ID) it runs in.")


def _not_null(schema: dict[str, Any]) -> None:
    """An optional field's JSON schema without its null: left out, not null."""
    options = [o for o in schema.pop("anyOf", []) if o.get("type") != "null"]
    schema.pop("default", None)
    schema.update(options[0])


def _stage_name_schema(schema: dict) -> None:
    """A stage name's JSON schema: a string of the name grammar, to leave out for the
    default (the service reads an explicit null as a name that is not a string)."""
    schema.pop("anyOf", None)
    schema.pop("default", None)
    schema.update(type="string", pattern=NAME_PATTERN, minLength=1, maxLength=100)


_NAME = Field(
    None,
    min_length=1,
    max_length=100,
    description="The stage's name, unique in the pipeline; defaults to its kind. Lower-case "
    "letters, digits, '.', '_' and '-', starting with a letter or digit (as other names).",
    json_schema_extra=_stage_name_schema,  # documented; validate_name refuses
)


class CurateStage(_CurationFields):
    """A ``curate`` stage: a curation request without ``project``."""

    kind: Literal["curate"] = Field(description="`curate`.")
    name: str | None = _NAME


class TrainStage(_Body):
    """A ``train`` stage: a run descriptor without ``kind``, ``project`` and
    ``submissionId``; ``config.dataset`` and ``config.validationDataset`` may name a curate
    stage's output (``stage:NAME``)."""

    kind: Literal["train"] = Field(description="`train`.")
    name: str | None = _NAME
    baseModel: str = Field(  # noqa: N815
        min_length=1,
        max_length=200,
        description="Required: the base model's hub repository (every pipeline train stage "
        "names its baseModel).",
    )
    modelName: str | None = Field(  # noqa: N815
        None, min_length=1, max_length=100, description="As a run descriptor's modelName."
    )
    smoke: bool | None = Field(
        None,
        description="Refused: a smoke run registers no model, so it is not a pipeline stage.",
    )
    warmStartModelId: str | None = Field(  # noqa: N815
        None, min_length=1, max_length=400, description="As a run descriptor's warmStartModelId."
    )
    branchFrom: BranchFrom | None = Field(None, description="As a run descriptor's branchFrom.")
    config: RunConfig = Field(description="As a run descriptor's config.")
    execution: ExecutionGroup | None = Field(None, description="As a run descriptor's execution.")


class EvaluateStage(_EvaluationFields):
    """An ``evaluate`` stage: an evaluation request without ``project``; ``modelId`` may
    name a train stage's model and ``dataset`` a curate stage's dataset."""

    kind: Literal["evaluate"] = Field(description="`evaluate`.")
    name: str | None = _NAME
    sampling: Sampling | None = Field(
        None,
        description="How answers are sampled (an object; left out for the defaults).",
        json_schema_extra=_not_null,  # documented: the stage's request refuses null
    )
    limit: int | None = Field(None, ge=1, description="Evaluate only the first N rows.")


Stage = Annotated[CurateStage | TrainStage | EvaluateStage, Field(discriminator="kind")]


class PipelinePlan(_Body):
    """A pipeline descriptor: ``POST /v1/training/pipelines`` and ``training pipelines start
    -f FILE``."""

    kind: Literal["pipeline"] = Field(description="Always `pipeline` for a pipeline descriptor.")
    project: str = Field(
        min_length=1, max_length=100, description="The training project every stage runs in."
    )
    submissionId: str | None = Field(  # noqa: N815
        None,
        min_length=1,
        max_length=128,
        description="Idempotency key: resubmitting with the same ID in the project returns the "
        "first pipeline.",
    )
    stages: list[Stage] = Field(
        min_length=1,
        max_length=16,
        description="The stages, run in order; stage:NAME names an earlier stage's output.",
    )


_STAGES = {"curate": CurateStage, "train": TrainStage, "evaluate": EvaluateStage}


def stage_fields(kind: str) -> tuple[str, ...]:
    """The fields a stage of ``kind`` (``curate``, ``train``, ``evaluate``) takes.

    Raises:
        KeyError: no such kind of stage.
    """
    return tuple(_STAGES[kind].model_fields)

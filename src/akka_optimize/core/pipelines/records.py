"""Pipelines: a descriptor of ordered stages — curate, train, evaluate — run one after
another as jobs (seeds/001 "The trainer documentation describes every field in run and
pipeline descriptors", "Every run and every pipeline train stage names its baseModel";
FEATURES F003, F022; issue 19 item 2).

**The descriptor**::

    {"kind": "pipeline", "project": "demo", "submissionId": "nightly-1",
     "stages": [
       {"kind": "curate", "name": "curate", "source": "demo/raw", "judge": "model:…",
        "keep": {"minScore": 0.6}, "dataset": "demo/curated"},
       {"kind": "train", "name": "train", "baseModel": "…", "modelName": "…",
        "config": {"method": "sft", "dataset": "stage:curate", …}, "execution": {…}},
       {"kind": "evaluate", "name": "evaluate", "modelId": "stage:train",
        "dataset": "demo/test", "grader": "bundle:demo/scoring#reward", "limit": 50}]}

- A **curate** stage takes the fields of ``POST /v1/training/curations`` but ``project``;
  a **train** stage the fields of a run descriptor but ``kind``, ``project`` and
  ``submissionId`` (``baseModel`` is required); an **evaluate** stage the fields of
  ``POST /v1/training/evaluations`` but ``project``. ``name`` defaults to the stage's
  kind and is unique in the pipeline.
- ``stage:NAME`` names an earlier stage's output: a curate stage's registered dataset
  (in a train stage's ``config.dataset`` or ``config.validationDataset``, an evaluate
  stage's ``dataset``, a curate stage's ``source``) or a train stage's registered model
  (an evaluate stage's ``modelId``).

**At submit** the whole descriptor is checked, every stage by the function that checks
its standalone form (:func:`akka_optimize.core.plans.dry_run`, the curations route's
:func:`~akka_optimize.core.requests.check_request`, the evaluations route's
``prepare`` and :func:`akka_optimize.evals.kind.check_scoring`), so the messages are the
same, prefixed with the stage (``stages[1] (train): baseModel: …``, field
``stages[1].baseModel``). An output that does not exist yet is checked through a stand-in:
a curate stage's output by its source (the curated rows are a subset of it), a train
stage's model by its base model. A refused descriptor creates nothing. The dry run
(``?dryRun=true``) answers every stage's resolved settings.

**Running**: stages run in order, each as the job its standalone form starts (a
curation, a run, an evaluation), through the scheduler. Each stage is started, with the
earlier outputs in place of ``stage:NAME``, when the one before it succeeded; a stage
that fails, is cancelled or cannot start ends the pipeline ``FAILED`` (``CANCELLED``)
with that stage's sentence. ``resume`` starts a failed or cancelled pipeline again from
its first unfinished stage (a new job for it; earlier stages keep their outputs).

**Identity**: a pipeline's ``configHash`` is the SHA-256 of its project and every
stage's resolved settings at submit; each stage keeps its own ``configHash`` and, once
started, its job's. A ``submissionId`` that the project already used returns that
pipeline (the rule of runs), so a descriptor submitted twice is recognised.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ...db.models.jobs import Pipeline
from ...errors import AkkaError, Conflict
from ...jobs import states as S
from ...jobs.scheduler import wake
from ..access import rules as access
from ..context import ServiceContext
from .runs import advance as advance
from .runs import advance_all as advance_all
from .runs import cancel_pipeline as cancel_pipeline
from .runs import resume_pipeline as resume_pipeline
from .shape import fill, in_stage
from .shape import references as references
from .shape import shape as shape
from .stages import check_stage, stages_hash
from .views import find_pipeline as find_pipeline
from .views import list_pipelines as list_pipelines
from .views import pipeline_view as pipeline_view


def _stand_in(ctx: ServiceContext, s: Session, principal: Any, stages: list[dict[str, Any]],
              checked: list[dict[str, Any]], j: int, project: str) -> Any:  # fmt: skip
    """What stands for stage ``j``'s output while the pipeline is checked: a curate
    stage's source (pinned), a train stage's base model (its registry reference)."""
    if stages[j]["kind"] == "curate":
        return checked[j]["settings"]["source"]
    base = stages[j]["baseModel"]
    rv = access.resolve(principal, s, "model", base, project, field="baseModel")
    return rv.pinned


def check_pipeline(
    ctx: ServiceContext, s: Session, raw: Any, principal: Any
) -> tuple[str, list[dict[str, Any]], str | None, list[dict[str, Any]]]:
    """Check a whole descriptor (module docstring); nothing is created.

    Returns:
        ``(project, stages, submissionId, checked)``: ``checked[i]`` holds stage ``i``'s
        resolved ``settings`` and ``configHash`` (with stand-ins for earlier outputs).

    Raises:
        AkkaError: the first refusal, of the descriptor or of a stage (prefixed
            ``stages[i] (NAME):``, field ``stages[i].FIELD``).
    """
    project, stages, sub = shape(raw)
    access.check_project_key_write(principal, s, project, "pipelines.start")
    project = access.find_project(s, project, principal).name
    access.check_project_write(principal, project, "pipelines.start")
    refs = references(stages)
    checked: list[dict[str, Any]] = []
    for i, st in enumerate(stages):
        try:
            stand = {
                j: _stand_in(ctx, s, principal, stages, checked, j, project)
                for j in set(refs[i].values())
            }
            filled = fill(st, refs[i], [stand.get(j) for j in range(len(stages))])
            checked.append(check_stage(ctx, s, principal, filled, project, start=False))
        except AkkaError as exc:
            raise in_stage(exc, i, st["name"]) from None
    return project, stages, sub, checked


def _stage_records(stages: list[dict[str, Any]], checked: list[dict[str, Any]]) -> list[dict]:
    return [
        {
            "index": i,
            "name": st["name"],
            "kind": st["kind"],
            "state": "PENDING",
            "job": None,
            "jobConfigHash": None,
            "earlierJobs": [],
            "output": None,
            "configHash": c["configHash"],
            "settings": c["settings"],
            "descriptor": st,
            "failureReason": None,
        }
        for i, (st, c) in enumerate(zip(stages, checked, strict=True))
    ]


def dry_run_pipeline(ctx: ServiceContext, s: Session, raw: Any, principal: Any) -> dict[str, Any]:
    """The dry run of a descriptor: every stage's resolved settings; creates nothing.

    Raises:
        AkkaError: the refusal the start would give.
    """
    project, stages, sub, checked = check_pipeline(ctx, s, raw, principal)
    records = _stage_records(stages, checked)
    return {
        "accepted": True,
        "project": project,
        "submissionId": sub,
        "configHash": _pipeline_hash(project, records),
        "stages": [
            {k: r[k] for k in ("index", "name", "kind", "configHash", "settings")} for r in records
        ],
    }


def _pipeline_hash(project: str, records: list[dict[str, Any]]) -> str:
    return stages_hash({"project": project, "stages": [r["settings"] for r in records]})


def start_pipeline(ctx: ServiceContext, s: Session, raw: Any, principal: Any) -> dict[str, Any]:
    """Check and record a pipeline; the scheduler's pass starts its first stage.

    A ``submissionId`` the project already used returns that pipeline.

    Raises:
        AkkaError: the descriptor is refused (:func:`check_pipeline`); nothing is created.
    """

    project, stages, sub, checked = check_pipeline(ctx, s, raw, principal)
    if sub:
        existing = s.scalar(
            select(Pipeline).where(Pipeline.project == project, Pipeline.submission_id == sub)
        )
        if existing is not None:
            return pipeline_view(s, existing)
    records = _stage_records(stages, checked)
    p = Pipeline(
        id=uuid.uuid4().hex[:16],
        project=project,
        submission_id=sub,
        state=S.RUNNING,
        descriptor=raw,
        stages=records,
        config_hash=_pipeline_hash(project, records),
    )
    try:
        with s.begin_nested():
            s.add(p)
            s.flush()
    except IntegrityError:
        existing = s.scalar(
            select(Pipeline).where(Pipeline.project == project, Pipeline.submission_id == sub)
        )
        if existing is None:
            raise Conflict("A concurrent request created this pipeline; retry.") from None
        return pipeline_view(s, existing)
    wake(ctx)
    return pipeline_view(s, p)

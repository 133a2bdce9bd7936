"""Evaluations: ``/v1/training/evaluations`` (seeds/001 "Scoring bundles live in the
registry"; FEATURES F058, F121, F123, F127).

An evaluation scores one model's answers to a dataset's prompts with a grader; it runs as a
job (:mod:`akka_optimize.evals.kind`). The model, dataset and bundle are pinned to exact
versions when the evaluation is accepted.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from ...errors import InvalidRequest
from ...evals import kind as evals
from ...evals.settings import grader_text
from ...jobs import control
from ...plan.pipeline import EvaluationRequest
from .. import access
from ..deps import CtxDep, PrincipalDep, SessionDep
from ..routing import JsonRoute
from ..schemas import EvaluationList, EvaluationView, answers

router = APIRouter(route_class=JsonRoute, prefix="/v1/training/evaluations")


EvaluationCreate = EvaluationRequest
"""Body of ``POST /v1/training/evaluations`` (:class:`akka_optimize.plan.pipeline.EvaluationRequest`)."""


def prepare(
    body: Any, s: Any, ctx: Any, principal: Any, action: str, baseline: str | None = None
) -> tuple[evals.EvalRequest, Any]:
    """The request of an evaluation (or, with ``baseline``, a comparison) and the
    ``resolve`` over the registry versions its project sees; refuses, naming the field, a
    model of another project, a base model without a project, and a baseline on another
    base model (both sides answer on one engine)."""
    project = None
    if body.project:
        access.check_project_key_write(principal, s, body.project, action)
        project = access.find_project(s, body.project, principal)
    model = access.resolve(
        principal, s, "model", body.modelId, project.name if project else None, field="modelId"
    )
    work = "an evaluation of project {project} scores"
    project = access.project_of_model(principal, s, model, project, action, work=work)
    access.check_project_write(principal, project.name, action)
    base_key = evals.base_key_of(model)
    other = None
    if baseline is not None:
        other = access.resolve(
            principal, s, "model", baseline, project.name, field="baselineModelId"
        )
        if other.source == "adapter" and other.namespace != project.name:
            raise access.refusal(
                action,
                f"{other.repo} is a model of project {other.namespace!r}; a comparison of "
                f"project {project.name!r} scores only that project's models and base models",
                field="baselineModelId",
            )
        if evals.base_key_of(other) != base_key:
            raise InvalidRequest(
                f"baselineModelId {other.repo}:v{other.version} runs on {evals.base_key_of(other)} and "
                f"modelId on {base_key}; a comparison answers with both models on one engine, "
                "so both must be that base model or its adapters.",
                field="baselineModelId",
            )
        if other.pinned == model.pinned:
            raise InvalidRequest(
                "baselineModelId names the same version as modelId; compare two versions.",
                field="baselineModelId",
            )

    def resolve(kind: str, ref: str, *, field: str) -> Any:
        return access.resolve(principal, s, kind, ref, project.name, field=field)

    dataset, grader, sampling = body.dataset, body.grader, body.sampling.model_dump()
    instructions = body.graderInstructions
    if dataset is None or grader is None:
        cfg = project.evaluation
        if not cfg:
            missing = "dataset" if dataset is None else "grader"
            raise InvalidRequest(
                f"{missing}: required, since project {project.name!r} has no evaluation "
                f"settings to take it from (`training projects set-evaluation {project.name}`).",
                field=missing,
            )
        dataset = dataset or cfg["dataset"]
        if grader is None:
            grader = grader_text(cfg)
            if instructions is None:
                instructions = cfg.get("graderInstructions")
        # the settings' sampling, with what the request states on top
        sampling = {**(cfg.get("sampling") or {}), **body.sampling.model_dump(exclude_unset=True)}

    req = evals.EvalRequest(
        project=project.name,
        model=model,
        base_key=base_key,
        dataset=dataset,
        grader=grader,
        grader_instructions=instructions,
        sampling=sampling,
        limit=body.limit,
        raw=body.model_dump(exclude_none=True),
        device_kind=evals.eval_device_kind(ctx.settings),
        baseline=other,
    )
    return req, resolve


@router.post("", status_code=201, **answers(EvaluationView, 201))
def start_evaluation(
    body: EvaluationCreate, s: SessionDep, ctx: CtxDep, principal: PrincipalDep
) -> JSONResponse:
    """Accept an evaluation: pin its references, refuse what would fail, queue it.
    A reference without a namespace (``NAME``) resolves in the request's ``project``;
    with no project it is refused (400 naming the field)."""
    req, resolve = prepare(body, s, ctx, principal, "evaluations.create")
    return JSONResponse(evals.start_evaluation(ctx, s, req, resolve), status_code=201)


@router.get("", **answers(EvaluationList))
def list_evaluations(
    s: SessionDep,
    principal: PrincipalDep,
    project: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    """Newest evaluations first, of the projects the caller sees."""
    visible, project = access.list_scope(principal, project)
    return {"evaluations": evals.list_evaluations(s, project, limit) if visible else []}


@router.get("/{evaluation_id}", **answers(EvaluationView))
def get_evaluation(
    evaluation_id: str,
    s: SessionDep,
    ctx: CtxDep,
    principal: PrincipalDep,
    examples: bool = False,
) -> dict[str, Any]:
    """One evaluation (ID or unambiguous prefix); ``examples=true`` adds every scored example."""
    run = evals.find_evaluation(s, evaluation_id, access.scope(principal))
    rows = evals.read_examples(ctx.store, run) if examples else None
    return evals.evaluation_view(s, run, examples=rows)


@router.post("/{evaluation_id}/cancel", **answers(EvaluationView))
def cancel_evaluation(
    evaluation_id: str, s: SessionDep, ctx: CtxDep, principal: PrincipalDep
) -> dict[str, Any]:
    """Cancel an evaluation: a queued one ends ``CANCELLED`` at once, a running one at its
    next example."""
    run = evals.find_evaluation(s, evaluation_id, access.scope(principal))
    access.check_project_write(principal, run.project, "evaluations.cancel")
    control.request_control(ctx, s, run, "cancel")
    return evals.evaluation_view(s, run)

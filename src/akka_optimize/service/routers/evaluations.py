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

from ...core.access import rules as access
from ...core.requests import prepare
from ...evals import kind as evals
from ...jobs import control
from ...plan.pipeline import EvaluationRequest
from ..deps import CtxDep, PrincipalDep, SessionDep
from ..routing import JsonRoute
from ..schemas import EvaluationList, EvaluationView, answers

router = APIRouter(route_class=JsonRoute, prefix="/v1/training/evaluations")


EvaluationCreate = EvaluationRequest
"""Body of ``POST /v1/training/evaluations`` (:class:`akka_optimize.plan.pipeline.EvaluationRequest`)."""


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

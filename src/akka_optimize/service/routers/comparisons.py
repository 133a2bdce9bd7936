"""Comparisons: ``/v1/training/comparisons`` (seeds/000 "Smaller changes": ID prefixes,
``comparisons list`` recovers an ID; FEATURES F126).

A comparison scores two models — the candidate (``modelId``) and the baseline
(``baselineModelId``), versions of one base model — on the same dataset with the same
grader, and reports the candidate's wins, losses and ties, the mean score difference with
its paired 95% confidence interval (:mod:`akka_optimize.evals.stats`) and the examples
that differ most. It runs as one job (:mod:`akka_optimize.evals.kind`, method
``compare``): both models answer on one engine.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import Field

from ...core.access import rules as access
from ...core.requests import prepare
from ...evals import kind as evals
from ...jobs import control
from ...plan.pipeline import EvaluationRequest as EvaluationCreate
from ..deps import CtxDep, PrincipalDep, SessionDep
from ..routing import JsonRoute
from ..schemas import ComparisonList, ComparisonView, answers

router = APIRouter(route_class=JsonRoute, prefix="/v1/training/comparisons")


class ComparisonCreate(EvaluationCreate):
    """Body of ``POST /v1/training/comparisons``: an evaluation's fields plus the baseline."""

    baselineModelId: str = Field(  # noqa: N815
        min_length=1,
        description="Registry reference of the model the candidate (modelId) is compared "
        "with: the same base model or another adapter of it.",
    )


@router.post("", status_code=201, **answers(ComparisonView, 201))
def create_comparison(
    body: ComparisonCreate, s: SessionDep, ctx: CtxDep, principal: PrincipalDep
) -> JSONResponse:
    """Accept a comparison: pin both models, the dataset and the bundle, queue it.
    A reference without a namespace (``NAME``) resolves in the request's ``project``;
    with no project it is refused (400 naming the field)."""
    req, resolve = prepare(
        body, s, ctx, principal, "comparisons.create", baseline=body.baselineModelId
    )
    return JSONResponse(evals.start_evaluation(ctx, s, req, resolve), status_code=201)


@router.get("", **answers(ComparisonList))
def list_comparisons(
    s: SessionDep,
    principal: PrincipalDep,
    project: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    """Newest comparisons first, of the projects the caller sees."""
    visible, project = access.list_scope(principal, project)
    found = evals.list_evaluations(s, project, limit, method=evals.COMPARE) if visible else []
    return {"comparisons": found}


@router.get("/{comparison_id}", **answers(ComparisonView))
def get_comparison(
    comparison_id: str,
    s: SessionDep,
    ctx: CtxDep,
    principal: PrincipalDep,
    examples: bool = False,
) -> dict[str, Any]:
    """One comparison (ID or unambiguous prefix); ``examples=true`` adds every example pair."""
    run = evals.find_evaluation(s, comparison_id, access.scope(principal), evals.COMPARE)
    rows = evals.read_examples(ctx.store, run) if examples else None
    return evals.comparison_view(s, run, examples=rows)


@router.post("/{comparison_id}/cancel", **answers(ComparisonView))
def cancel_comparison(
    comparison_id: str, s: SessionDep, ctx: CtxDep, principal: PrincipalDep
) -> dict[str, Any]:
    """Cancel a comparison; it ends ``CANCELLED`` (nothing recorded is lost)."""
    run = evals.find_evaluation(s, comparison_id, access.scope(principal), evals.COMPARE)
    access.check_project_write(principal, run.project, "comparisons.cancel")
    control.request_control(ctx, s, run, "cancel")
    return evals.comparison_view(s, run)

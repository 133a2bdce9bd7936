"""Curations: ``/v1/training/curations`` (seeds/001 "Datasets live in the registry";
FEATURES F023; issue 19 item 1).

A curation asks a ``model:`` judge to score every row of a source dataset and registers
the rows its keep rule keeps as ``dataset``, and every row with its score as
``dataset-judge`` (:mod:`akka_optimize.evals.curation.kind`). It runs as a job (method
``curate``); the source and the judge are pinned when it is accepted.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from ...core.access import rules as access
from ...core.curations import visible_curations
from ...core.requests import check_request
from ...evals import kind as evals
from ...evals.curation import kind as curation
from ...jobs import control
from ...plan.pipeline import CurationRequest
from ..deps import CtxDep, PrincipalDep, SessionDep
from ..routing import JsonRoute
from ..schemas import CurationList, CurationView, answers

router = APIRouter(route_class=JsonRoute, prefix="/v1/training/curations")


CurationCreate = CurationRequest
"""Body of ``POST /v1/training/curations`` (:class:`akka_optimize.plan.pipeline.CurationRequest`)."""


@router.post("", status_code=201, **answers(CurationView, 201))
def start_curation(
    body: CurationCreate, s: SessionDep, ctx: CtxDep, principal: PrincipalDep
) -> JSONResponse:
    """Accept a curation: pin the source and the judge, refuse what would fail, queue it.
    A reference without a namespace (``NAME``) resolves in the request's ``project``;
    with no project it is refused (400 naming the field)."""
    raw = body.model_dump(exclude_none=True)
    resolved = check_request(raw, s, ctx, principal, "curations.create")
    view = curation.start_curation(ctx, s, resolved, raw, evals.eval_device_kind(ctx.settings))
    return JSONResponse(view, status_code=201)


@router.get("", **answers(CurationList))
def list_curations(
    s: SessionDep,
    principal: PrincipalDep,
    project: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    """Newest curations first, of the projects the caller sees."""
    return {"curations": visible_curations(s, principal, project, limit)}


@router.get("/{curation_id}", **answers(CurationView))
def get_curation(curation_id: str, s: SessionDep, principal: PrincipalDep) -> dict[str, Any]:
    """One curation (ID or unambiguous prefix)."""
    run = evals.find_evaluation(s, curation_id, access.scope(principal), curation.METHOD)
    return curation.curation_view(s, run)


@router.post("/{curation_id}/cancel", **answers(CurationView))
def cancel_curation(
    curation_id: str, s: SessionDep, ctx: CtxDep, principal: PrincipalDep
) -> dict[str, Any]:
    """Cancel a curation: a queued one ends ``CANCELLED`` at once, a running one at its next
    row; nothing is registered."""
    run = evals.find_evaluation(s, curation_id, access.scope(principal), curation.METHOD)
    access.check_project_write(principal, run.project, "curations.cancel")
    control.request_control(ctx, s, run, "cancel")
    return curation.curation_view(s, run)

"""Pipelines: ``/v1/training/pipelines`` (seeds/001 pipeline descriptors, the curate stage;
FEATURES F003, F022; issue 19 item 2).

``POST`` takes a pipeline descriptor (:mod:`akka_optimize.core.pipelines.records`); with
``?dryRun=true`` it answers every stage's resolved settings and creates nothing. Stages
run in order as jobs; ``cancel`` stops the current one, ``resume`` starts a failed or
cancelled pipeline again from its first unfinished stage.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from ...core.access import rules as access
from ...core.pipelines import records as P
from ..connected import while_connected
from ..deps import CtxDep, PrincipalDep, SessionDep
from ..routing import JsonRoute
from ..schemas import PipelineDryRun, PipelineList, PipelineView, answers
from .runs import read_json_body

router = APIRouter(route_class=JsonRoute, prefix="/v1/training/pipelines")


@router.post(
    "",
    **answers(
        PipelineDryRun,
        200,
        "Every stage's resolved settings (dryRun=true); nothing is created.",
        also={201: (PipelineView, "The pipeline, accepted.")},
    ),
)
async def start_pipeline(
    request: Request, ctx: CtxDep, principal: PrincipalDep, dryRun: bool = False
) -> JSONResponse:
    """Start a pipeline from a descriptor, or with ``dryRun=true`` show every stage's
    resolved settings. A refused descriptor creates nothing. Each stage's name is one of its
    own (two stages of one name are refused); ``stage:NAME`` names an earlier stage's
    output (a later or missing stage is refused). A reference without a namespace (``NAME``) resolves in the request's ``project``;
    with no project it is refused (400 naming the field)."""
    raw = await read_json_body(request)

    def work() -> dict[str, Any]:
        with ctx.db.session() as s:
            if dryRun:
                return P.dry_run_pipeline(ctx, s, raw, principal)
            return P.start_pipeline(ctx, s, raw, principal)

    if dryRun:  # every stage's findings: stopped if the client leaves
        return JSONResponse(await while_connected(request, "dry run", work), status_code=200)
    return JSONResponse(await run_in_threadpool(work), status_code=201)


@router.get("", **answers(PipelineList))
def list_pipelines(
    s: SessionDep,
    principal: PrincipalDep,
    project: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    """Newest pipelines first, of the projects the caller sees."""
    visible, project = access.list_scope(principal, project)
    return {"pipelines": P.list_pipelines(s, project, limit) if visible else []}


@router.get("/{pipeline_id}", **answers(PipelineView))
def get_pipeline(pipeline_id: str, s: SessionDep, principal: PrincipalDep) -> dict[str, Any]:
    """One pipeline (ID or unambiguous prefix) with every stage."""
    return P.pipeline_view(s, P.find_pipeline(s, pipeline_id, access.scope(principal)))


@router.post("/{pipeline_id}/cancel", **answers(PipelineView))
def cancel_pipeline(
    pipeline_id: str, s: SessionDep, ctx: CtxDep, principal: PrincipalDep
) -> dict[str, Any]:
    """Cancel a running pipeline and its current stage's job."""
    p = P.find_pipeline(s, pipeline_id, access.scope(principal))
    access.check_project_write(principal, p.project, "pipelines.control")
    P.cancel_pipeline(ctx, s, p)
    return P.pipeline_view(s, p)


@router.post("/{pipeline_id}/resume", **answers(PipelineView))
def resume_pipeline(
    pipeline_id: str, s: SessionDep, ctx: CtxDep, principal: PrincipalDep
) -> dict[str, Any]:
    """Start a failed or cancelled pipeline again from its first unfinished stage."""
    p = P.find_pipeline(s, pipeline_id, access.scope(principal))
    access.check_project_write(principal, p.project, "pipelines.control")
    P.resume_pipeline(ctx, s, p)
    return P.pipeline_view(s, p)

"""OpenAI's fine-tuning jobs (issue 51 item 2): ``POST /v1/fine_tuning/jobs``, ``GET`` the
list (``after``, ``limit``, ``metadata[KEY]=VALUE``), one job, ``POST …/cancel``,
``…/pause``, ``…/resume``, ``GET …/events`` and ``…/checkpoints`` (paginated). A job is a
run (:mod:`akka_optimize.core.openai_ft.jobs`, state mapping in
:mod:`akka_optimize.core.openai_ft.views`); a project token acts in its project only.
"""

from __future__ import annotations

import copy
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ....core.access import rules as access
from ....core.context import ServiceContext
from ....core.openai_ft import job_service, views
from ....core.openai_ft.acting import acting_project
from ....core.openai_ft.file_store import page
from ....core.plans import resolve_run_plan
from ....errors import InvalidRequest
from ....jsonvalues import loads
from ...deps import CtxDep, PrincipalDep
from ...routing import JsonRoute
from ...schemas import answers
from ...schemas.openai_ft import OpenAICheckpointList, OpenAIJob, OpenAIJobEventList, OpenAIJobList
from .common import error_response, in_session, visible

router = APIRouter(route_class=JsonRoute, prefix="/v1/fine_tuning/jobs", tags=["openai"])


@router.post("", **answers(OpenAIJob, 200, "The job, created (its run is queued)."))
async def create_job(request: Request, ctx: CtxDep, principal: PrincipalDep) -> JSONResponse:
    """Create a fine-tuning job: a run of the method's plan; ``"auto"`` values come back
    resolved. A field this service cannot honour is a 400 naming it.

    The body is OpenAI's request object, its fields as OpenAI's API reference gives them:
    a field missing, unknown or not honoured here is refused in OpenAI's error shape naming
    it, and an admin token names its project with the ``OpenAI-Project`` header.
    """
    try:
        body = loads(await request.body() or b"null")
    except InvalidRequest as exc:
        return error_response(exc)

    def work(s: Any) -> dict[str, Any]:
        project = acting_project(s, principal, visible(principal, request))
        access.check_project_write(principal, project, "runs.start")

        def resolve(plan: dict[str, Any]) -> Any:
            return resolve_run_plan(ctx, s, copy.deepcopy(plan), principal)

        return job_service.start_job(ctx, s, project, body, resolve)

    return await in_session(ctx, work)


@router.get("", **answers(OpenAIJobList))
async def list_jobs(
    request: Request,
    ctx: CtxDep,
    principal: PrincipalDep,
    after: str | None = None,
    limit: int = 20,
) -> JSONResponse:
    """The caller's jobs, newest first; ``metadata[KEY]=VALUE`` keeps those whose metadata
    has every pair."""
    project = visible(principal, request)
    meta = {
        k[len("metadata[") : -1]: v
        for k, v in request.query_params.items()
        if k.startswith("metadata[") and k.endswith("]")
    }
    limit = max(1, min(limit, 100))
    return await in_session(ctx, lambda s: job_service.list_jobs(s, project, after, limit, meta))


@router.get("/{job_id}", **answers(OpenAIJob))
async def get_job(
    job_id: str, request: Request, ctx: CtxDep, principal: PrincipalDep
) -> JSONResponse:
    """One job."""
    project = visible(principal, request)
    return await in_session(ctx, lambda s: views.job_view(job_service.find_job(s, job_id, project)))


async def _control(
    job_id: str, request: Request, ctx: ServiceContext, principal: Any, action: str
) -> JSONResponse:
    project = visible(principal, request)

    def work(s: Any) -> dict[str, Any]:
        run = job_service.find_job(s, job_id, project)
        access.check_project_write(principal, run.project, "runs.start", "fine_tuning_job_id")
        return job_service.control(ctx, s, run, action)

    return await in_session(ctx, work)


@router.post("/{job_id}/cancel", **answers(OpenAIJob))
async def cancel_job(
    job_id: str, request: Request, ctx: CtxDep, principal: PrincipalDep
) -> JSONResponse:
    """Cancel a job (a running one stops at its next update boundary)."""
    return await _control(job_id, request, ctx, principal, "cancel")


@router.post("/{job_id}/pause", **answers(OpenAIJob))
async def pause_job(
    job_id: str, request: Request, ctx: CtxDep, principal: PrincipalDep
) -> JSONResponse:
    """Pause a job (it saves and stops at its next update boundary)."""
    return await _control(job_id, request, ctx, principal, "pause")


@router.post("/{job_id}/resume", **answers(OpenAIJob))
async def resume_job(
    job_id: str, request: Request, ctx: CtxDep, principal: PrincipalDep
) -> JSONResponse:
    """Resume a paused job from its newest kept save."""
    return await _control(job_id, request, ctx, principal, "resume")


@router.get("/{job_id}/events", **answers(OpenAIJobEventList))
async def job_events(
    job_id: str,
    request: Request,
    ctx: CtxDep,
    principal: PrincipalDep,
    after: str | None = None,
    limit: int = 20,
) -> JSONResponse:
    """The job's events, newest first (``after`` an event ID, ``limit``)."""
    project = visible(principal, request)
    limit = max(1, min(limit, 1000))
    return await in_session(
        ctx,
        lambda s: page(views.events(s, job_service.find_job(s, job_id, project)), after, limit),
    )


@router.get("/{job_id}/checkpoints", **answers(OpenAICheckpointList))
async def job_checkpoints(
    job_id: str,
    request: Request,
    ctx: CtxDep,
    principal: PrincipalDep,
    after: str | None = None,
    limit: int = 10,
) -> JSONResponse:
    """The job's checkpoints (snapshots that kept an adapter), newest first."""
    project = visible(principal, request)
    limit = max(1, min(limit, 100))
    return await in_session(
        ctx,
        lambda s: page(
            views.checkpoints(s, job_service.find_job(s, job_id, project)), after, limit
        ),
    )

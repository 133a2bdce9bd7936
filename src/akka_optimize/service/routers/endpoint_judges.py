"""Judge endpoints (:mod:`.endpoints`): the endpoint that serves an evaluation's
``model:`` judge, created and started for the evaluation's worker, and one chat
completion forwarded to it (the routes are in :mod:`.run_records`)."""

from __future__ import annotations

import threading
from typing import Any

import httpx
from fastapi.responses import JSONResponse
from sqlalchemy import select
from sqlalchemy.orm import Session

from ...core.context import ServiceContext
from ...core.endpoint_records import find_endpoint, manager, models, new_endpoint, view
from ...db.models.jobs import Run
from ...db.models.projects import Project
from ...db.models.serving import Endpoint
from ...errors import InvalidRequest, NotFound
from ...registry import resolve
from .endpoint_forwarding import begin_request, end_request, oai_error, ready_worker

_JUDGE_LOCK = threading.Lock()


def _judge_of(s: Session, run_id: str) -> tuple[Any, dict[str, Any]]:
    """The run and its pinned judge grader, for the judge routes.

    Raises:
        InvalidRequest: the run is not an evaluation graded by a ``model:`` judge.
    """

    run = s.get(Run, run_id)
    g = ((run.resolved or {}).get("grader") or {}) if run is not None else {}
    if run is None or not g.get("judge"):
        raise InvalidRequest(
            f"Run {run_id} is not an evaluation graded by a model: judge.",
            code="judge_unavailable",
        )
    return run, g


def _judge_endpoints(s: Session, project_id: str, pinned: str) -> list[Endpoint]:
    """Endpoints of ``project_id`` that serve exactly the judge version ``pinned``."""
    out = []
    for ep in s.scalars(
        select(Endpoint).where(Endpoint.project_id == project_id).order_by(Endpoint.created_at)
    ):
        rows = models(s, ep)
        if len(rows) == 1 and rows[0].pinned == pinned:
            out.append(ep)
    return out


def ensure_judge_endpoint(ctx: ServiceContext, run_id: str) -> dict[str, Any]:
    """The endpoint that serves run ``run_id``'s ``model:`` judge, created in the run's
    project when the project has none serving exactly that version (one endpoint per
    judge version and project, reused by later evaluations), and started when it is not
    running (a failed one is tried again). Returns its API view.

    Raises:
        InvalidRequest: the run has no judge. NotFound: its project is gone.
    """

    start = False
    with _JUDGE_LOCK:
        with ctx.db.session() as s:
            run, g = _judge_of(s, run_id)
            project = s.scalar(select(Project).where(Project.name == run.project))
            if project is None:
                raise NotFound(f"Run {run_id}'s project {run.project!r} no longer exists.")
            found = _judge_endpoints(s, project.id, g["judge"])
            if found:
                ep = found[-1]
                start = ep.state in ("FAILED", "STOPPED")
            else:
                rv = resolve(s, "model", g["judge"])
                rank = (rv.metadata or {}).get("rank") if rv.source == "adapter" else None
                row = {
                    "kind": "adapter" if rv.source == "adapter" else "base",
                    "rank": int(rank) if rank is not None else None,
                    "ref": rv.pinned,
                    "pinned": rv.pinned,
                    "served_name": f"{rv.repo}:v{rv.version}",
                    "instructions": rv.metadata.get("instructions")
                    or (rv.metadata.get("annotations") or {}).get("instructions"),
                }
                ep = new_endpoint(s, ctx, project.id, g["judgeBase"], row)
                start = True
            endpoint_id = ep.id
        if start:
            manager(ctx).request_start(endpoint_id)
    with ctx.db.session() as s:
        return view(s, find_endpoint(s, endpoint_id), ctx)


async def judge_chat(ctx: ServiceContext, run_id: str, body: dict[str, Any]) -> JSONResponse:
    """Forward one chat completion (not streamed) to run ``run_id``'s judge endpoint,
    waiting for it to be ready; the ``model`` is the judge's served name. A judge endpoint
    that failed answers 400 ``endpoint_failed`` with its reason."""
    from starlette.concurrency import run_in_threadpool

    def find() -> tuple[str, str]:
        with ctx.db.session() as s:
            run, g = _judge_of(s, run_id)
            project = s.scalar(select(Project).where(Project.name == run.project))
            found = _judge_endpoints(s, project.id, g["judge"]) if project else []
            if not found:
                raise InvalidRequest(
                    f"Run {run_id}'s judge has no endpoint yet; POST …/judge first.",
                    code="judge_unavailable",
                )
            return found[-1].id, g["judgeModel"]

    endpoint_id, served = await run_in_threadpool(find)
    try:
        w, _names = await ready_worker(ctx, endpoint_id)
    except InvalidRequest as exc:
        return oai_error(exc.message, 400, exc.code or "endpoint_failed")
    payload = {**body, "model": served, "stream": False}
    base = await begin_request(ctx, endpoint_id)
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(600, connect=10)) as client:
            r = await client.post(w.url + "/v1/chat/completions", json=payload, headers=w.headers())
    finally:
        await end_request(ctx, endpoint_id, base)
    return JSONResponse(r.json(), status_code=r.status_code)

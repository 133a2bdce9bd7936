"""Endpoints under ``/v1/training/endpoints`` (seeds/000 "Endpoints reachable from your
machine", seeds/001 endpoint changes; FEATURES F110–F120).

- ``POST /v1/training/endpoints`` ``{"model", "project"?}``: serve a base-model version
  or a registered adapter version. An adapter takes its own project when none is given;
  a base model requires one. An adapter above ``serving.maxLoraRank`` is refused here.
- ``GET /v1/training/endpoints[?project=]``, ``GET …/{id}``, ``DELETE …/{id}``; ``{id}``
  may be an unambiguous ID prefix.
- ``GET /v1/training/endpoints/info``: what an endpoint of this deployment can serve.
- ``DELETE …/{id}/models/{NS/NAME[:tag]}``: detach the version served by any reference.
- ``…/{id}/openai/v1/chat/completions`` and ``…/{id}/openai/v1/models``: the OpenAI API,
  forwarded to the endpoint's worker (streams pass through). A stopped endpoint is
  started again by its next request.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from ...db.models.projects import Project
from ...db.models.serving import Endpoint, EndpointModel
from ...deployment import load_deployment
from ...errors import InvalidRequest, NotFound
from ...jobs import capacity
from ...jsonvalues import loads
from ...serving.manager import EndpointManager, idle_for
from ...serving.parsers import parsers_table
from .. import access
from ..auth import Principal
from ..context import ServiceContext
from ..deps import CtxDep, PrincipalDep, SessionDep

router = APIRouter(prefix="/v1/training/endpoints", tags=["endpoints"])
_KEY = "endpoints"


class EndpointCreate(BaseModel):
    """Body of ``POST /v1/training/endpoints``."""

    model_config = ConfigDict(extra="forbid")
    model: str = Field(min_length=1, description="Registry reference of a base model or adapter.")
    project: str | None = Field(None, description="Project name or ID (required for a base model).")


def _limits(ctx: ServiceContext) -> Any:
    return load_deployment(ctx.settings.resolved_deployment_file()).serving


def manager(ctx: ServiceContext) -> EndpointManager:
    """The service's endpoint manager (created on first use)."""
    m = ctx.extras.get(_KEY)
    if m is None:
        m = ctx.extras[_KEY] = EndpointManager(ctx.db, ctx.settings, ctx.store, _limits(ctx))
        m.admit = lambda endpoint_id: capacity.endpoint_may_start(
            ctx.db, load_deployment(ctx.settings.resolved_deployment_file()), endpoint_id
        )
    return m


def refuse_endpoint_claim(ctx: ServiceContext, project: str) -> None:
    """Refuse an endpoint of ``project`` (a name) whose claim no quota or pool could ever
    admit (issue 22).

    Raises:
        InvalidRequest: ``quota_exceeded``, naming the quota or the pool.
    """
    dep = load_deployment(ctx.settings.resolved_deployment_file())
    n = capacity.endpoint_devices(dep)
    pool = capacity.serving_pool(dep).name
    refused = capacity.refusal(
        dep, project, {pool: n} if n else {}, capacity.claim_words({pool: n}, False), "model"
    )
    if refused is not None:
        raise refused


def on_startup(ctx: ServiceContext) -> None:
    """Endpoints a previous process served are ``STOPPED``; their next request starts them.
    A post-deploy check the restart interrupted runs again when the endpoint next starts."""
    manager(ctx)
    with ctx.db.session() as s:
        for ep in s.scalars(
            select(Endpoint).where(Endpoint.state.in_(("QUEUED", "STARTING", "READY")))
        ):
            ep.state, ep.activity = "STOPPED", "the service restarted; the next request starts it"
        for row in s.scalars(select(EndpointModel).where(EndpointModel.checks.is_not(None))):
            if (row.checks or {}).get("state") == "RUNNING":
                row.checks = None


def on_shutdown(ctx: ServiceContext) -> None:
    """Stop every worker."""
    m = ctx.extras.get(_KEY)
    if m is not None:
        m.shutdown()


def find_endpoint(s: Session, key: str, principal: Principal | None = None) -> Endpoint:
    """The endpoint with ID ``key`` or the only one whose ID starts with it, among those of
    the projects ``principal`` sees (every endpoint when None).

    Raises:
        NotFound: no visible endpoint matches. InvalidRequest: the prefix matches several.
    """
    pid = access.project_id(principal, s)
    ep = s.get(Endpoint, key)
    if ep is not None and pid in (None, ep.project_id):
        return ep
    q = select(Endpoint).where(Endpoint.id.startswith(key.lower(), autoescape=True))
    if pid is not None:
        q = q.where(Endpoint.project_id == pid)
    found = list(s.scalars(q.limit(5)))
    if not found:
        raise NotFound(
            f"No endpoint {key!r}; `training endpoints list` shows them.", field="endpoint"
        )
    if len(found) > 1:
        raise InvalidRequest(
            f"Endpoint ID prefix {key!r} is ambiguous: it matches "
            f"{', '.join(e.id for e in found)}; give more characters.",
            field="endpoint",
        )
    return found[0]


def _models(s: Session, ep: Endpoint) -> list[EndpointModel]:
    return list(
        s.scalars(
            select(EndpointModel)
            .where(EndpointModel.endpoint_id == ep.id)
            .order_by(EndpointModel.id)
        )
    )


def view(s: Session, ep: Endpoint, ctx: ServiceContext) -> dict[str, Any]:
    """The API shape of an endpoint."""
    proj = s.get(Project, ep.project_id)
    rows = _models(s, ep)
    # a STARTING endpoint says what its model is doing (F111); its queue position is
    # only news while it waits
    activity = ep.activity
    if ep.state == "QUEUED" and not activity:
        activity = manager(ctx).queue_line(ep.id)
    return {
        "id": ep.id,
        "projectId": ep.project_id,
        "projectName": proj.name if proj else None,
        "state": ep.state,
        "activity": activity,
        "error": ep.error,
        "baseModel": ep.base_model,
        "engine": ep.engine,
        "models": [
            {
                "model": r.served_name,
                "kind": r.kind,
                "ref": r.ref,
                "pinned": r.pinned,
                "rank": r.rank,
                "instructions": r.instructions,
                "checks": r.checks,
            }
            for r in rows
        ],
        "instructions": rows[0].instructions if rows else None,
        "checks": {r.served_name: r.checks for r in rows if r.kind == "adapter"},
        "openaiBaseUrl": f"/v1/training/endpoints/{ep.id}/openai/v1",
        "idleSeconds": idle_for(ep),
        "createdAt": ep.created_at.isoformat() if ep.created_at else None,
    }


def _resolve_model(
    s: Session, ctx: ServiceContext, ref: str, project: Project | None, principal: Principal
) -> tuple[dict[str, Any], str, Project]:
    rv = access.resolve(
        principal, s, "model", ref, project.name if project else None, field="model"
    )
    work = "an endpoint of project {project} serves"
    project = access.project_of_model(
        principal, s, rv, project, "endpoints.create", work=work, field="model"
    )
    if rv.source == "adapter":
        rank = rv.metadata.get("rank") or (rv.metadata.get("lora") or {}).get("rank")
        if rank is None:
            from ...serving.engine import adapter_rank

            rank = adapter_rank(manager(ctx).adapter_dir(s, rv.pinned))
        limit = _limits(ctx).maxLoraRank
        if rank is not None and int(rank) > limit:
            raise InvalidRequest(
                f"{rv.repo}:v{rv.version} is an adapter of rank {rank}, above the largest rank "
                f"an endpoint of this deployment loads ({limit}; `training endpoints info`).",
                field="model",
                code="rank_too_large",
            )
        base = rv.base_model or ""
        from ...refs import parse_ref

        b = parse_ref(base)
        base_key = f"{b.repo}:v{b.version}" if b.version else b.repo
        row = {"kind": "adapter", "rank": int(rank) if rank is not None else None}
    else:
        base_key = f"{rv.repo}:v{rv.version}"
        row = {"kind": "base", "rank": None}
    row.update(
        ref=ref,
        pinned=rv.pinned,
        served_name=f"{rv.repo}:v{rv.version}",
        instructions=rv.metadata.get("instructions")
        or (rv.metadata.get("annotations") or {}).get("instructions"),
    )
    return row, base_key, project


def _new_endpoint(
    s: Session, ctx: ServiceContext, project_id: str, base_key: str, row: dict[str, Any]
) -> Endpoint:
    """Add an endpoint record (``QUEUED``) serving the one model ``row`` describes."""
    ep = Endpoint(
        id=uuid.uuid4().hex,
        project_id=project_id,
        state="QUEUED",
        base_model=base_key,
        engine=_limits(ctx).engine,
    )
    s.add(ep)
    s.flush()
    s.add(EndpointModel(endpoint_id=ep.id, **row))
    return ep


@router.post("", status_code=201)
def create_endpoint(
    body: EndpointCreate, s: SessionDep, ctx: CtxDep, principal: PrincipalDep
) -> JSONResponse:
    """Create an endpoint and start making its model resident. A project token creates
    endpoints of its own project only; no endpoint serves another project's adapter (403
    ``optimize.training.projects.endpoints.create``)."""
    project = None
    if body.project:
        access.check_project_key_write(principal, s, body.project, "endpoints.create")
        project = access.find_project(s, body.project, principal)
    row, base_key, project = _resolve_model(s, ctx, body.model, project, principal)
    from ...catalog.cache import ready_model_dir

    ready_model_dir(s, ctx.settings, base_key)  # refuses a base model that is not READY
    refuse_endpoint_claim(ctx, project.name)
    ep = _new_endpoint(s, ctx, project.id, base_key, row)
    s.commit()
    manager(ctx).request_start(ep.id)
    s.refresh(ep)
    return JSONResponse(view(s, ep, ctx), status_code=201)


@router.get("")
def list_endpoints(
    s: SessionDep, ctx: CtxDep, principal: PrincipalDep, project: str | None = None
) -> dict[str, Any]:
    """Every endpoint of the projects the caller sees, newest first (``?project=`` filters)."""
    q = select(Endpoint).order_by(Endpoint.created_at.desc())
    if project:
        q = q.where(Endpoint.project_id == access.find_project(s, project, principal).id)
    pid = access.project_id(principal, s)
    if pid is not None:
        q = q.where(Endpoint.project_id == pid)
    return {"endpoints": [view(s, e, ctx) for e in s.scalars(q)]}


@router.get("/info")
def endpoints_info(ctx: CtxDep) -> dict[str, Any]:
    """What an endpoint can serve (seeds/001 "What an endpoint can serve")."""
    lim = _limits(ctx)
    dep = load_deployment(ctx.settings.resolved_deployment_file())
    prof = dep.profile(lim.deviceProfile) if lim.deviceProfile else None
    return {
        "engine": lim.engine,
        "maxLoraRank": lim.maxLoraRank,
        "maxAdaptersLoaded": lim.maxAdaptersLoaded,
        "reservedDevices": lim.reservedDevices,
        "deviceType": prof.name if prof else ("cpu" if lim.reservedDevices == 0 else "cuda"),
        "maxContextTokens": lim.maxContextTokens,
        "idleSeconds": lim.idleSeconds,
        "mergeAdapters": lim.mergeAdapters and lim.engine == "transformers",
        "parsers": parsers_table(),
    }


@router.get("/{endpoint_id}")
def get_endpoint(
    endpoint_id: str, s: SessionDep, ctx: CtxDep, principal: PrincipalDep
) -> dict[str, Any]:
    """One endpoint (ID or unambiguous prefix)."""
    return view(s, find_endpoint(s, endpoint_id, principal), ctx)


@router.delete("/{endpoint_id}")
def delete_endpoint(
    endpoint_id: str, s: SessionDep, ctx: CtxDep, principal: PrincipalDep
) -> dict[str, Any]:
    """Delete an endpoint; its worker stops when no other endpoint uses its base model."""
    ep = find_endpoint(s, endpoint_id, principal)
    out = view(s, ep, ctx)
    m = manager(ctx)
    others = s.scalars(
        select(Endpoint.id).where(Endpoint.base_model == ep.base_model, Endpoint.id != ep.id)
    ).first()
    for r in _models(s, ep):
        if r.kind == "adapter":
            m.detach(ep.id, r.served_name)
        s.delete(r)
    s.delete(ep)
    # Committed before the manager writes in its own session (SQLite allows one writer),
    # and nothing is read afterwards: a read would begin a new writing transaction on
    # this session and hold the lock the manager's session then waits on.
    s.commit()
    if others is None:
        m.stop_base(ep.base_model, "deleted")
    out["state"] = "DELETED"
    return out


@router.delete("/{endpoint_id}/models/{ref:path}")
def detach_model(
    endpoint_id: str, ref: str, s: SessionDep, ctx: CtxDep, principal: PrincipalDep
) -> dict[str, Any]:
    """Detach the version ``ref`` names (any reference to it) from the endpoint."""
    from ...registry import resolve

    ep = find_endpoint(s, endpoint_id, principal)
    proj = s.get(Project, ep.project_id)
    rv = resolve(s, "model", ref, proj.name if proj else None, field="ref")
    rows = [r for r in _models(s, ep) if r.pinned == rv.pinned]
    if not rows:
        raise NotFound(f"Endpoint {ep.id} does not serve {rv.pinned}.", field="ref")
    for r in rows:
        if r.kind == "adapter":
            manager(ctx).detach(ep.id, r.served_name)
        s.delete(r)
    s.flush()
    return view(s, ep, ctx)


# OpenAI forwarding ------------------------------------------------------------------
def _oai_error(message: str, status: int, code: str, param: str | None = None) -> JSONResponse:
    err = {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    return JSONResponse({"error": err}, status_code=status)


def _visible_id(ctx: ServiceContext, endpoint_id: str, principal: Principal) -> str:
    """The full ID of an endpoint the caller sees (404 as :func:`find_endpoint`)."""
    with ctx.db.session() as s:
        return find_endpoint(s, endpoint_id, principal).id


async def _ready_worker(ctx: ServiceContext, endpoint_id: str) -> tuple[Any, list[str]]:
    m = manager(ctx)
    for _ in range(6000):
        with ctx.db.session() as s:
            ep = find_endpoint(s, endpoint_id)
            served = [r.served_name for r in _models(s, ep)]
            names = served + [ep.base_model] * (ep.base_model not in served)
            state, eid = ep.state, ep.id
            err = ep.error
        w = m.worker_for(eid)
        if state == "READY" and w is not None:
            return w, names
        if state == "FAILED":
            raise InvalidRequest(f"Endpoint {eid} failed: {err}", code="endpoint_failed")
        if state in ("STOPPED", "READY"):
            m.request_start(eid)
        await asyncio.sleep(0.1)
    raise InvalidRequest(f"Endpoint {endpoint_id} did not start in time.")


@router.get("/{endpoint_id}/openai/v1/models")
async def openai_models(endpoint_id: str, ctx: CtxDep, principal: PrincipalDep) -> Any:
    """The models this endpoint serves (OpenAI ``/v1/models``)."""
    endpoint_id = _visible_id(ctx, endpoint_id, principal)
    w, names = await _ready_worker(ctx, endpoint_id)
    async with httpx.AsyncClient(timeout=60) as c:
        r = await c.get(w.url + "/v1/models", headers=w.headers())
    data = r.json()
    data["data"] = [d for d in data.get("data", []) if d["id"] in names]
    data["data"].sort(key=lambda d: d["id"] != d.get("root"))  # the base model first
    return data


@router.post("/{endpoint_id}/openai/v1/chat/completions")
async def openai_chat(
    endpoint_id: str, request: Request, ctx: CtxDep, principal: PrincipalDep
) -> Any:
    """Forward a chat completion to the endpoint's worker."""
    endpoint_id = _visible_id(ctx, endpoint_id, principal)
    raw = await request.body()
    try:
        body = loads(raw or b"null")
    except InvalidRequest as exc:
        return _oai_error(exc.message, 400, "invalid_json", exc.field)
    w, names = await _ready_worker(ctx, endpoint_id)
    if isinstance(body, dict):
        body.setdefault("model", names[0] if names else None)
        if body["model"] not in names:
            return _oai_error(
                f"The model {body['model']!r} does not exist on this endpoint; it serves "
                f"{', '.join(names)}.",
                400,
                "model_not_found",
                "model",
            )
    m = manager(ctx)
    base = m.begin(endpoint_id)  # the worker is busy, not idle, until the answer ends
    client = httpx.AsyncClient(timeout=httpx.Timeout(600, connect=10))
    try:
        req = client.build_request(
            "POST", w.url + "/v1/chat/completions", json=body, headers=w.headers()
        )
        resp = await client.send(req, stream=True)
    except BaseException:
        await client.aclose()
        m.end(endpoint_id, base)
        raise
    if resp.headers.get("content-type", "").startswith("text/event-stream"):

        async def relay() -> Any:
            try:
                async for chunk in resp.aiter_raw():
                    yield chunk
            finally:
                await resp.aclose()
                await client.aclose()
                m.end(endpoint_id, base)

        return StreamingResponse(relay(), media_type="text/event-stream")
    try:
        content = await resp.aread()
    finally:
        await resp.aclose()
        await client.aclose()
        m.end(endpoint_id, base)
    return Response(
        content,
        status_code=resp.status_code,
        media_type=resp.headers.get("content-type", "application/json"),
    )


# judges ---------------------------------------------------------------------------
_JUDGE_LOCK = threading.Lock()


def _judge_of(s: Session, run_id: str) -> tuple[Any, dict[str, Any]]:
    """The run and its pinned judge grader, for the judge routes.

    Raises:
        InvalidRequest: the run is not an evaluation graded by a ``model:`` judge.
    """
    from ...db.models.jobs import Run

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
        rows = _models(s, ep)
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
    from ...registry import resolve

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
                ep = _new_endpoint(s, ctx, project.id, g["judgeBase"], row)
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
        w, _names = await _ready_worker(ctx, endpoint_id)
    except InvalidRequest as exc:
        return _oai_error(exc.message, 400, exc.code or "endpoint_failed")
    payload = {**body, "model": served, "stream": False}
    m = manager(ctx)
    base = m.begin(endpoint_id)
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(600, connect=10)) as client:
            r = await client.post(w.url + "/v1/chat/completions", json=payload, headers=w.headers())
    finally:
        m.end(endpoint_id, base)
    return JSONResponse(r.json(), status_code=r.status_code)

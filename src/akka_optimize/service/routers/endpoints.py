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

This module holds the routes; an endpoint's records (manager, lookup, view) live in
:mod:`.endpoint_records`, waiting on a worker in :mod:`.endpoint_forwarding`, and judge
endpoints in :mod:`.endpoint_judges`, their public names importable from here.
"""

from __future__ import annotations

from typing import Any

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import Field
from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from ...catalog.cache import ready_model_dir
from ...core.access import rules as access
from ...core.auth import Principal
from ...core.context import ServiceContext
from ...core.endpoint_records import (
    find_endpoint,
    limits,
    manager,
    models,
    new_endpoint,
    refuse_endpoint_claim,
    view,
)
from ...db.models.projects import Project
from ...db.models.serving import Endpoint, EndpointModel
from ...errors import InvalidRequest, NotFound
from ...jsonvalues import loads
from ...plan.pipeline import documented
from ...plan.schema.base import RequestModel
from ...refs import REF_PATTERN
from ...serving.parsers import parsers_table
from ..deps import CtxDep, PrincipalDep, SessionDep
from ..metrics import StreamTally, count_answer
from ..routing import JsonRoute
from ..schemas import (
    ChatCompletion,
    EndpointList,
    EndpointsInfo,
    EndpointView,
    OpenAIModelList,
    TextCompletion,
    answers,
)
from .endpoint_forwarding import (
    begin_request,
    end_request,
    oai_error,
    ready_worker,
    served_model,
    visible_id,
)

router = APIRouter(route_class=JsonRoute, prefix="/v1/training/endpoints", tags=["endpoints"])


class EndpointCreate(RequestModel):
    """Body of ``POST /v1/training/endpoints``."""

    model: str = Field(
        min_length=1,
        description="Registry reference of a base model or adapter; a reference without a "
        "namespace resolves in project.",
        json_schema_extra=documented(REF_PATTERN),
    )
    project: str | None = Field(None, description="Project name or ID (required for a base model).")


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
    if ctx.endpoints is not None:
        ctx.endpoints.shutdown()


def resolve_model(
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
            from ...serving.engine import adapter_rank  # lazy: guarded

            rank = adapter_rank(manager(ctx).adapter_dir(s, rv.pinned))
        limit = limits(ctx).maxLoraRank
        if rank is not None and int(rank) > limit:
            raise InvalidRequest(
                f"{rv.repo}:v{rv.version} is an adapter of rank {rank}, above the largest rank "
                f"an endpoint of this deployment loads ({limit}; `training endpoints info`).",
                field="model",
                code="rank_too_large",
            )
        base = rv.base_model or ""
        from ...refs import parse_ref  # lazy: guarded

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


@router.post("", status_code=201, **answers(EndpointView, 201))
def create_endpoint(
    body: EndpointCreate, s: SessionDep, ctx: CtxDep, principal: PrincipalDep
) -> JSONResponse:
    """Create an endpoint and start making its model resident. A project token creates
    endpoints of its own project only; no endpoint serves another project's adapter (403
    ``optimize.training.projects.endpoints.create``). A reference without a namespace (``NAME``) resolves in the request's ``project``;
    with no project it is refused (400 naming the field)."""
    project = None
    if body.project:
        access.check_project_key_write(principal, s, body.project, "endpoints.create")
        project = access.find_project(s, body.project, principal)
    row, base_key, project = resolve_model(s, ctx, body.model, project, principal)

    ready_model_dir(s, ctx.settings, base_key)  # refuses a base model that is not READY
    refuse_endpoint_claim(ctx, project.name)
    ep = new_endpoint(s, ctx, project.id, base_key, row)
    s.commit()
    manager(ctx).request_start(ep.id)
    s.refresh(ep)
    return JSONResponse(view(s, ep, ctx), status_code=201)


@router.get("", **answers(EndpointList))
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


@router.get("/info", **answers(EndpointsInfo))
def endpoints_info(ctx: CtxDep) -> dict[str, Any]:
    """What an endpoint can serve (seeds/001 "What an endpoint can serve")."""
    lim = limits(ctx)
    dep = ctx.deployment()
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
        "precision": lim.precision,
        "parsers": parsers_table(),
    }


@router.get("/{endpoint_id}", **answers(EndpointView))
def get_endpoint(
    endpoint_id: str, s: SessionDep, ctx: CtxDep, principal: PrincipalDep
) -> dict[str, Any]:
    """One endpoint (ID or unambiguous prefix)."""
    return view(s, find_endpoint(s, endpoint_id, principal), ctx)


@router.delete(
    "/{endpoint_id}", **answers(EndpointView, 200, "The endpoint as it was (state DELETED).")
)
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
    for r in models(s, ep):
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


@router.delete("/{endpoint_id}/models/{ref:path}", **answers(EndpointView))
def detach_model(
    endpoint_id: str, ref: str, s: SessionDep, ctx: CtxDep, principal: PrincipalDep
) -> dict[str, Any]:
    """Detach the version ``ref`` names (any reference to it) from the endpoint."""
    ep = find_endpoint(s, endpoint_id, principal)
    proj = s.get(Project, ep.project_id)
    # among the versions the caller sees: another project's reads as missing (issue 48)
    rv = access.resolve(principal, s, "model", ref, proj.name if proj else None, field="ref")
    rows = [r for r in models(s, ep) if r.pinned == rv.pinned]
    if not rows:
        raise NotFound(f"Endpoint {ep.id} does not serve {rv.pinned}.", field="ref")
    for r in rows:
        if r.kind == "adapter":
            manager(ctx).detach(ep.id, r.served_name)
        s.delete(r)
    s.flush()
    return view(s, ep, ctx)


# OpenAI forwarding ------------------------------------------------------------------
@router.get("/{endpoint_id}/openai/v1/models", **answers(OpenAIModelList))
async def openai_models(endpoint_id: str, ctx: CtxDep, principal: PrincipalDep) -> Any:
    """The models this endpoint serves (OpenAI ``/v1/models``)."""
    endpoint_id = await visible_id(ctx, endpoint_id, principal)
    w, names = await ready_worker(ctx, endpoint_id)
    async with httpx.AsyncClient(timeout=60) as c:
        r = await c.get(w.url + "/v1/models", headers=w.headers())
    data = r.json()
    data["data"] = [d for d in data.get("data", []) if d["id"] in names]
    data["data"].sort(key=lambda d: d["id"] != d.get("root"))  # the base model first
    return data


@router.post(
    "/{endpoint_id}/openai/v1/chat/completions",
    response_model=None,
    responses={
        200: {
            "model": ChatCompletion,
            "description": "The chat completion; with stream true, its chunks as "
            "server-sent events (`data: {chat.completion.chunk}`, then `data: [DONE]`).",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        }
    },
)
async def openai_chat(
    endpoint_id: str, request: Request, ctx: CtxDep, principal: PrincipalDep
) -> Any:
    """Forward a chat completion to the endpoint's worker."""
    return await forward_to_worker(endpoint_id, request, ctx, principal, "/v1/chat/completions")


@router.post(
    "/{endpoint_id}/openai/v1/completions",
    response_model=None,
    responses={200: {"model": TextCompletion, "description": "The legacy text completion."}},
)
async def openai_completions(
    endpoint_id: str, request: Request, ctx: CtxDep, principal: PrincipalDep
) -> Any:
    """Forward a legacy text completion (``echo``, prompt ``logprobs``: what lm-eval's
    ``local-completions`` sends) to the endpoint's worker."""
    return await forward_to_worker(endpoint_id, request, ctx, principal, "/v1/completions")


async def forward_to_worker(
    endpoint_id: str,
    request: Request,
    ctx: CtxDep,
    principal: PrincipalDep,
    path: str,
    body: Any = None,
) -> Any:
    """Send the request's body (or ``body``, already decoded), its ``model`` mapped to a
    served name (:func:`served_model`), to the worker's ``path``; stream an SSE answer
    through."""
    endpoint_id = await visible_id(ctx, endpoint_id, principal)
    if body is None:
        try:
            body = loads(await request.body() or b"null")
        except InvalidRequest as exc:
            return oai_error(exc.message, 400, "invalid_json", exc.field)
    w, names = await ready_worker(ctx, endpoint_id)
    if isinstance(body, dict):
        body.setdefault("model", names[0] if names else None)
        try:
            body["model"] = await run_in_threadpool(
                served_model, ctx, endpoint_id, str(body["model"]), names
            )
        except InvalidRequest as exc:
            return oai_error(exc.message, 400, exc.code or "model_not_found", "model")
    base = await begin_request(ctx, endpoint_id)  # busy, not idle, until the answer ends
    client = httpx.AsyncClient(timeout=httpx.Timeout(600, connect=10))
    try:
        req = client.build_request("POST", w.url + path, json=body, headers=w.headers())
        resp = await client.send(req, stream=True)
    except BaseException:
        await client.aclose()
        await end_request(ctx, endpoint_id, base)
        raise
    if resp.headers.get("content-type", "").startswith("text/event-stream"):
        tally = StreamTally(endpoint_id)  # /metrics: the request and its usage's tokens

        async def relay() -> Any:
            try:
                async for chunk in resp.aiter_raw():
                    tally.feed(chunk)
                    yield chunk
            finally:
                tally.close(resp.status_code)
                await resp.aclose()
                await client.aclose()
                await end_request(ctx, endpoint_id, base)

        return StreamingResponse(relay(), media_type="text/event-stream")
    try:
        content = await resp.aread()
    finally:
        await resp.aclose()
        await client.aclose()
        await end_request(ctx, endpoint_id, base)
    count_answer(endpoint_id, resp.status_code, content)
    return Response(
        content,
        status_code=resp.status_code,
        media_type=resp.headers.get("content-type", "application/json"),
    )

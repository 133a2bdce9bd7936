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

This module holds the routes; an endpoint's records (manager, lookup, view, served names)
live in :mod:`akka_optimize.core.endpoints.records`, its life (create, list, delete,
detach) in :mod:`akka_optimize.core.endpoints.lifecycle`, waiting on a worker in
:mod:`.endpoint_forwarding`, and judge endpoints in :mod:`.endpoint_judges`.
"""

from __future__ import annotations

from typing import Any

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import Field
from starlette.concurrency import run_in_threadpool

from ....core.context import ServiceContext
from ....core.endpoints import lifecycle
from ....core.endpoints.records import find_endpoint, limits, served_model, view
from ....errors import InvalidRequest
from ....jsonvalues import loads
from ....plan.pipeline import documented
from ....plan.schema.base import RequestModel
from ....refs import REF_PATTERN
from ....serving.parsers import parsers_table
from ...deps import CtxDep, PrincipalDep, SessionDep
from ...metrics import StreamTally, count_answer
from ...routing import JsonRoute
from ...schemas import (
    ChatCompletion,
    EndpointList,
    EndpointsInfo,
    EndpointView,
    OpenAIModelList,
    TextCompletion,
    answers,
)
from .forwarding import begin_request, end_request, oai_error, ready_worker, visible_id

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
    lifecycle.mark_stopped_after_restart(ctx)


def on_shutdown(ctx: ServiceContext) -> None:
    """Stop every worker."""
    if ctx.endpoints is not None:
        ctx.endpoints.shutdown()


@router.post("", status_code=201, **answers(EndpointView, 201))
def create_endpoint(
    body: EndpointCreate, s: SessionDep, ctx: CtxDep, principal: PrincipalDep
) -> JSONResponse:
    """Create an endpoint and start making its model resident. A project token creates
    endpoints of its own project only; no endpoint serves another project's adapter (403
    ``optimize.training.projects.endpoints.create``). A reference without a namespace (``NAME``) resolves in the request's ``project``;
    with no project it is refused (400 naming the field)."""
    out = lifecycle.create_endpoint(ctx, s, principal, body.model, body.project)
    return JSONResponse(out, status_code=201)


@router.get("", **answers(EndpointList))
def list_endpoints(
    s: SessionDep, ctx: CtxDep, principal: PrincipalDep, project: str | None = None
) -> dict[str, Any]:
    """Every endpoint of the projects the caller sees, newest first (``?project=`` filters)."""
    return {"endpoints": lifecycle.list_endpoints(ctx, s, principal, project)}


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
    return lifecycle.delete_endpoint(ctx, s, principal, endpoint_id)


@router.delete("/{endpoint_id}/models/{ref:path}", **answers(EndpointView))
def detach_model(
    endpoint_id: str, ref: str, s: SessionDep, ctx: CtxDep, principal: PrincipalDep
) -> dict[str, Any]:
    """Detach the version ``ref`` names (any reference to it) from the endpoint."""
    return lifecycle.detach_model(ctx, s, principal, endpoint_id, ref)


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

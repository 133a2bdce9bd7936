"""``POST /v1/chat/completions`` on the service itself (issue 51 item 4): OpenAI's chat
route where ``model`` names what to answer with, not an endpoint.

``model`` is a fine-tuned model (``ft:BASE:SUFFIX:RUN``), one of its checkpoints
(``…:ckpt-step-N``: the snapshot's adapter, registered as a version of the job's model on
first use) or any registry reference of a model version the caller sees. The request goes
to a READY endpoint of the model's project serving that version. When none is ready the
service starts one (or asks a stopped one to start) and answers 503 with ``Retry-After``
(the openai SDK retries a 503 by itself) until it is; when quota or capacity can never
admit one it refuses with a sentence (``quota_exceeded``).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from ...core.access import rules as access
from ...core.auth import Principal
from ...core.context import ServiceContext
from ...core.endpoint_records import manager, new_endpoint, refuse_endpoint_claim
from ...core.openai_ft.errors import OpenAIError
from ...core.openai_ft.views import parse_ft_name, record
from ...db.models.jobs import Run, Snapshot
from ...db.models.serving import Endpoint, EndpointModel
from ...errors import AkkaError
from ...jobs.results import register
from ...jsonvalues import loads
from ..deps import CtxDep, PrincipalDep
from ..routing import JsonRoute
from ..schemas import ChatCompletion
from .endpoints import forward_to_worker, resolve_model
from .openai_common import error_response, visible

router = APIRouter(route_class=JsonRoute, tags=["openai"])
RETRY_AFTER_S = 2
"""Seconds a 503 asks the client to wait while the model's endpoint starts."""


def _not_found(model: str, why: str) -> OpenAIError:
    return OpenAIError(
        f"The model {model!r} does not exist: {why}.", "model", "model_not_found", 404
    )


def pinned_model(
    ctx: ServiceContext, s: Session, principal: Principal, project: str | None, model: str
) -> str:
    """The pinned registry version ``model`` names (module docstring).

    Raises:
        OpenAIError: 404 ``model_not_found``: another project's job, a job that has not
            succeeded, a checkpoint that kept no adapter, or a reference to nothing visible.
    """
    ft = parse_ft_name(model)
    if ft is None:
        try:
            return access.resolve(principal, s, "model", model, project, field="model").pinned
        except AkkaError as exc:
            raise _not_found(model, exc.message) from None
    run = s.get(Run, ft[0])
    if run is None or record(run) is None or project not in (None, run.project):
        raise _not_found(model, "no such fine-tuning job")
    if ft[1] is None:
        if not run.registered_model:
            raise _not_found(
                model, f"job ftjob-{run.id} has not succeeded (its run is {run.state})"
            )
        return run.registered_model
    snap = s.scalar(select(Snapshot).where(Snapshot.run_id == run.id, Snapshot.step == ft[1]))
    if snap is None or snap.adapter_key is None:
        raise _not_found(model, f"job ftjob-{run.id} kept no adapter at step {ft[1]}")
    if snap.model_version:
        return snap.model_version

    return register(ctx, s, run, snap, {"snapshot": f"step-{snap.step}"})


def endpoint_for(
    ctx: ServiceContext, principal: Principal, project: str | None, model: str
) -> tuple[str, str, bool]:
    """``(endpoint ID, served name, ready)`` of an endpoint serving ``model``, created and
    started when none exists (committed at once, so the manager sees it).

    Raises:
        OpenAIError: as :func:`pinned_model`; ``quota_exceeded`` when no quota or pool can
            ever admit an endpoint of the project; an endpoint of it that FAILED.
    """

    with ctx.db.session() as s:
        pinned = pinned_model(ctx, s, principal, project, model)
        owner = pinned.split("/", 1)[0]
        rows = s.execute(
            select(Endpoint, EndpointModel)
            .join(EndpointModel, EndpointModel.endpoint_id == Endpoint.id)
            .where(EndpointModel.pinned == pinned)
            .order_by(Endpoint.created_at)
        ).all()
        mine = [(e, r) for e, r in rows if access.find_project(s, e.project_id).name == owner]
        live = [(e, r) for e, r in mine if e.state != "FAILED"]
        if live:
            ep, row = next(((e, r) for e, r in live if e.state == "READY"), live[0])
            eid, served, state = ep.id, row.served_name, ep.state
        elif mine:
            raise OpenAIError(
                f"The endpoint serving {model} failed: {mine[-1][0].error}",
                "model",
                "endpoint_failed",
                503,
            )
        else:
            proj = access.find_project(s, owner)
            row_spec, base_key, proj = resolve_model(s, ctx, pinned, proj, principal)
            from ...catalog.cache import ready_model_dir  # lazy: guarded

            ready_model_dir(s, ctx.settings, base_key)
            refuse_endpoint_claim(ctx, proj.name)
            ep = new_endpoint(s, ctx, proj.id, base_key, row_spec)
            eid, served, state = ep.id, row_spec["served_name"], "QUEUED"
    m = manager(ctx)
    ready = state == "READY" and m.worker_for(eid) is not None
    if not ready and state in ("STOPPED", "QUEUED", "READY"):
        m.request_start(eid)
    return eid, served, ready


def starting(model: str) -> OpenAIError:
    """The 503 answered while ``model``'s endpoint starts."""
    return OpenAIError(
        f"The model {model} is loading on its endpoint; retry in {RETRY_AFTER_S} s.",
        "model",
        "model_loading",
        503,
        {"Retry-After": str(RETRY_AFTER_S)},
    )


@router.post(
    "/v1/chat/completions",
    response_model=None,
    responses={
        200: {"model": ChatCompletion, "description": "The chat completion (or SSE chunks)."}
    },
)
async def chat_completions(request: Request, ctx: CtxDep, principal: PrincipalDep) -> Any:
    """A chat completion by the model ``model`` names (module docstring).

    The body is OpenAI's request object, its fields as OpenAI's API reference gives them:
    a field missing, unknown or not honoured here is refused in OpenAI's error shape naming
    it, and an admin token names its project with the ``OpenAI-Project`` header.
    """

    raw = await request.body()
    try:
        body = loads(raw or b"null")
        if not isinstance(body, dict) or not isinstance(body.get("model"), str):
            raise OpenAIError(
                "model is required: a fine-tuned model or a registry reference.",
                "model",
                "missing_required_parameter",
            )
        model = body["model"]
        project = visible(principal, request)
        eid, served, ready = await run_in_threadpool(endpoint_for, ctx, principal, project, model)
        if not ready:
            raise starting(model)
    except (OpenAIError, AkkaError) as exc:
        return error_response(exc)
    body["model"] = served
    return await forward_to_worker(eid, request, ctx, principal, "/v1/chat/completions", body)

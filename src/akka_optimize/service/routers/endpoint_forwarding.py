"""Forwarding to an endpoint's worker (:mod:`.endpoints`): the OpenAI-shaped error, the
visible endpoint's full ID, and waiting for (and starting) its worker."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from ...core.auth import Principal
from ...core.context import ServiceContext
from ...core.endpoint_records import find_endpoint, manager, models
from ...db.models.projects import Project
from ...errors import InvalidRequest, NotFound
from ...refs import parse_ref
from ...registry.resolution import resolve_ref


def oai_error(message: str, status: int, code: str, param: str | None = None) -> JSONResponse:
    err = {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    return JSONResponse({"error": err}, status_code=status)


async def visible_id(ctx: ServiceContext, endpoint_id: str, principal: Principal) -> str:
    """The full ID of an endpoint the caller sees (404 as :func:`find_endpoint`), read in
    the thread pool: a session on the event loop would stall every request while it waits
    on the state store (issue 48 item 1)."""

    def read() -> str:
        with ctx.db.session() as s:
            return find_endpoint(s, endpoint_id, principal).id

    return await run_in_threadpool(read)


def _poll_worker(ctx: ServiceContext, endpoint_id: str) -> tuple[Any, list[str]]:
    """One look at the endpoint (a thread-pool call): its ready worker and served names,
    or ``(None, names)`` after asking a stopped endpoint to start. Raises InvalidRequest
    ``endpoint_failed`` for a FAILED endpoint."""
    m = manager(ctx)
    with ctx.db.session() as s:
        ep = find_endpoint(s, endpoint_id)
        served = [r.served_name for r in models(s, ep)]
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
    return None, names


async def ready_worker(ctx: ServiceContext, endpoint_id: str) -> tuple[Any, list[str]]:
    """The endpoint's ready worker and served names, starting it if stopped (polled every
    0.1 s for at most 10 minutes)."""
    for _ in range(6000):
        w, names = await run_in_threadpool(_poll_worker, ctx, endpoint_id)
        if w is not None:
            return w, names
        await asyncio.sleep(0.1)
    raise InvalidRequest(f"Endpoint {endpoint_id} did not start in time.")


async def begin_request(ctx: ServiceContext, endpoint_id: str) -> str | None:
    """:meth:`EndpointManager.begin` in the thread pool (it reads and writes the store)."""
    return await run_in_threadpool(manager(ctx).begin, endpoint_id)


async def end_request(ctx: ServiceContext, endpoint_id: str, base: str | None) -> None:
    """:meth:`EndpointManager.end` in the thread pool, shielded: it runs to its end even
    when the request that counted it is being cancelled (its client left)."""
    with anyio.CancelScope(shield=True):
        await run_in_threadpool(manager(ctx).end, endpoint_id, base)


def served_model(ctx: ServiceContext, endpoint_id: str, model: str, names: list[str]) -> str:
    """The served name (one of ``names``) that the request's ``model`` refers to (reads
    the state store: an async route calls it in the thread pool).

    Any unambiguous reference to a version the endpoint serves names it, as the registry
    resolves references (issue 47 item 12): the served name itself, the repository in
    any case (``HuggingFaceTB/SmolLM2-135M-Instruct``), a bare name in the endpoint's
    project, an alias, ``:vN`` or a digest. A reference without a version names the one
    version of that repository the endpoint serves.

    Raises:
        InvalidRequest: (``field="model"``) a malformed reference, one naming a version the
            endpoint does not serve (``model_not_found``), or a repository of which it
            serves several versions (``model_ambiguous``).
    """

    if model in names:
        return model
    served = {n: parse_ref(n, field="model") for n in names}
    with ctx.db.session() as s:
        ep = find_endpoint(s, endpoint_id)
        proj = s.get(Project, ep.project_id) if ep.project_id else None
        ref = parse_ref(model, proj.name if proj else None, field="model")
        if ref.version is None and ref.alias is None and ref.digest is None:
            hits = [n for n, r in served.items() if r.repo == ref.repo]
            named = ref.repo
        else:
            try:
                rv = resolve_ref(s, "model", ref, field="model")
            except NotFound as exc:
                raise InvalidRequest(
                    f"The model {model!r} does not exist on this endpoint: {exc.message}",
                    field="model",
                    code="model_not_found",
                ) from exc
            hits = [n for n, r in served.items() if (r.repo, r.version) == (rv.repo, rv.version)]
            named = f"{rv.repo}:v{rv.version}"
    if len(hits) == 1:
        return hits[0]
    if hits:
        raise InvalidRequest(
            f"The model {model!r} names {named}, of which this endpoint serves "
            f"{', '.join(hits)}; name one of them.",
            field="model",
            code="model_ambiguous",
        )
    raise InvalidRequest(
        f"The model {model!r} ({named}) does not exist on this endpoint; it serves "
        f"{', '.join(names)}.",
        field="model",
        code="model_not_found",
    )

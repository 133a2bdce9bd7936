"""Forwarding to an endpoint's worker (:mod:`.endpoints`): the OpenAI-shaped error, the
visible endpoint's full ID, and waiting for (and starting) its worker."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from ....core.auth import Principal
from ....core.context import ServiceContext
from ....core.endpoints.records import manager, poll_worker, visible_endpoint_id
from ....errors import InvalidRequest


def oai_error(message: str, status: int, code: str, param: str | None = None) -> JSONResponse:
    err = {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    return JSONResponse({"error": err}, status_code=status)


async def visible_id(ctx: ServiceContext, endpoint_id: str, principal: Principal) -> str:
    """The full ID of an endpoint the caller sees (404 as :func:`~akka_optimize.core.endpoints.records.find_endpoint`), read in
    the thread pool: a session on the event loop would stall every request while it waits
    on the state store (issue 48 item 1)."""

    return await run_in_threadpool(visible_endpoint_id, ctx, endpoint_id, principal)


async def ready_worker(ctx: ServiceContext, endpoint_id: str) -> tuple[Any, list[str]]:
    """The endpoint's ready worker and served names, starting it if stopped (polled every
    0.1 s for at most 10 minutes; :func:`~akka_optimize.core.endpoints.records.poll_worker`).

    Raises:
        InvalidRequest: ``endpoint_failed`` for a FAILED endpoint; one that did not start
            in time.
    """
    for _ in range(6000):
        w, names = await run_in_threadpool(poll_worker, ctx, endpoint_id)
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

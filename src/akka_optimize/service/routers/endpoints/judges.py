"""Judge endpoints (:mod:`.endpoints`): one chat completion forwarded to the endpoint
that serves an evaluation's ``model:`` judge (the routes are in :mod:`.run_records`;
the endpoint itself is :mod:`akka_optimize.core.endpoints.judges`)."""

from __future__ import annotations

from typing import Any

import httpx
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from ....core.context import ServiceContext
from ....core.endpoints.judges import judge_target
from ....errors import InvalidRequest
from .forwarding import begin_request, end_request, oai_error, ready_worker


async def judge_chat(ctx: ServiceContext, run_id: str, body: dict[str, Any]) -> JSONResponse:
    """Forward one chat completion (not streamed) to run ``run_id``'s judge endpoint,
    waiting for it to be ready; the ``model`` is the judge's served name. A judge endpoint
    that failed answers 400 ``endpoint_failed`` with its reason."""
    endpoint_id, served = await run_in_threadpool(judge_target, ctx, run_id)
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

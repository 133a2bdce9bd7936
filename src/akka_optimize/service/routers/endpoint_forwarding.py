"""Forwarding to an endpoint's worker (:mod:`.endpoints`): the OpenAI-shaped error, the
visible endpoint's full ID, and waiting for (and starting) its worker."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi.responses import JSONResponse

from ...errors import InvalidRequest
from ..auth import Principal
from ..context import ServiceContext
from .endpoint_records import _models, find_endpoint, manager


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

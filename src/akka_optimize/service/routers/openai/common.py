"""What the OpenAI-compatible routers share (issue 51): the caller's project, OpenAI's
error shape for every refusal, and running a route's work in the thread pool inside one
state-store transaction (:func:`akka_optimize.core.openai_ft.acting.in_transaction`: a
refusal rolls it back, it stores nothing).

The project: a project token's own; an admin token names one with the ``OpenAI-Project``
header (the openai SDK's ``project=`` option), and without it reads every project and
creates nothing.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from ....core.access import rules as access
from ....core.auth import Principal
from ....core.context import ServiceContext
from ....core.openai_ft.acting import SessionWork, in_transaction
from ....core.openai_ft.errors import OpenAIError, from_platform
from ....errors import AkkaError


def visible(principal: Principal, request: Request) -> str | None:
    """The project the caller acts in: its token's, else the ``OpenAI-Project`` header's,
    else None (an admin reading every project)."""
    mine = access.scope(principal)
    if mine is not None:
        return mine
    named = request.headers.get("openai-project")
    return named.strip().lower() if named else None


def error_response(exc: OpenAIError | AkkaError) -> JSONResponse:
    """The refusal in OpenAI's shape (``Retry-After`` kept on a 503)."""
    err = exc if isinstance(exc, OpenAIError) else from_platform(exc)
    headers = dict(err.headers)
    if isinstance(exc, AkkaError) and exc.status == 503:
        headers.setdefault("Retry-After", "5")
    return JSONResponse(err.body(), status_code=err.status, headers=headers or None)


async def in_session(ctx: ServiceContext, work: SessionWork, status: int = 200) -> JSONResponse:
    """``work(session)`` in the thread pool, in one transaction, its answer as JSON; an
    :class:`OpenAIError` or platform refusal is answered in OpenAI's shape, rolled back."""

    try:
        return JSONResponse(await call(ctx, work), status_code=status)
    except (OpenAIError, AkkaError) as exc:
        return error_response(exc)


async def call(ctx: ServiceContext, work: SessionWork) -> Any:
    """``work(session)`` in the thread pool in one transaction (committed when it returns,
    rolled back when it raises); its refusals propagate."""

    return await run_in_threadpool(in_transaction, ctx, work)

"""Shared FastAPI dependencies (``Annotated`` aliases used by every router)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

import anyio
import anyio.to_thread
from fastapi import Depends, Header, Request
from sqlalchemy.orm import Session

from ..core.auth import Principal, authenticate
from ..core.context import ServiceContext
from ..errors import Forbidden, Unavailable


def get_ctx(request: Request) -> ServiceContext:
    """The service context of the running app."""
    return request.app.state.ctx


def get_principal(
    request: Request, authorization: Annotated[str | None, Header()] = None
) -> Principal:
    """The authenticated caller (raises 401/503 as :func:`authenticate` does).

    A worker's attempt token (scoped ``worker:RUN``) reaches only its own run's attempt
    routes (``…/attempts/N/events``, and an evaluation's ``…/judge`` and
    ``…/judge/chat/completions``); anywhere else it is refused with 403.
    """
    principal = authenticate(get_ctx(request), authorization)
    if principal.kind == "worker":
        run = (principal.project or "").removeprefix("worker:")
        prefix = f"/v1/training/runs/{run}/attempts/"
        path = request.url.path
        own = ("/events", "/judge", "/judge/chat/completions")
        if not (run and path.startswith(prefix) and path.endswith(own)):
            raise Forbidden(
                f"This token belongs to a worker of run {run} and may only report that run's "
                "events.",
                field="authorization",
            )
    return principal


async def raw_ctx(request: Request) -> ServiceContext:
    """The context, started or not (a coroutine, as :func:`require_started` is)."""
    return get_ctx(request)


async def require_started(request: Request) -> ServiceContext:
    """The context, once start-up has completed; else 503 with Retry-After.

    A coroutine on purpose: FastAPI runs a plain function dependency in its thread pool,
    one thread hand-off per request for a flag check (issue 14, load)."""
    ctx = get_ctx(request)
    if not ctx.started.is_set():
        msg = ctx.startup_error or "The service is still starting; retry in a few seconds."
        raise Unavailable(msg)
    return ctx


async def get_session(
    ctx: Annotated[ServiceContext, Depends(require_started)],
) -> AsyncIterator[Session]:
    """A database session committed when the handler returns, before the answer is sent.

    ``SessionDep`` uses ``scope="function"``: the commit runs when the handler
    returns, so a commit that fails becomes the answer instead of following an
    acknowledged one. A refusal raised by the handler rolls everything back.

    A coroutine: the session is created on the event loop (no I/O until its first query)
    and ended in one worker-thread call, shielded from a client that leaves, so a request
    costs one thread hand-off less than a plain generator's set-up and tear-down calls
    (issue 14, load). The ending call does not queue for the request threads' capacity
    (as FastAPI's own tear-down does not): a commit that releases the write lock must not
    wait behind requests that wait for that lock.
    """
    s = ctx.db.open_session()
    handled = False
    try:
        yield s
        handled = True
    finally:  # commit when the handler returned, roll back when it raised
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(
                ctx.db.end_session, s, handled, limiter=anyio.CapacityLimiter(1)
            )


CtxDep = Annotated[ServiceContext, Depends(require_started)]
RawCtxDep = Annotated[ServiceContext, Depends(raw_ctx)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
SessionDep = Annotated[Session, Depends(get_session, scope="function")]

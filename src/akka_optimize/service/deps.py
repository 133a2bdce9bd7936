"""Shared FastAPI dependencies (``Annotated`` aliases used by every router)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Header, Request
from sqlalchemy.orm import Session

from ..errors import Forbidden, Unavailable
from .auth import Principal, authenticate
from .context import ServiceContext


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


def require_started(ctx: Annotated[ServiceContext, Depends(get_ctx)]) -> ServiceContext:
    """The context, once start-up has completed; else 503 with Retry-After."""
    if not ctx.started.is_set():
        msg = ctx.startup_error or "The service is still starting; retry in a few seconds."
        raise Unavailable(msg)
    return ctx


def get_session(ctx: Annotated[ServiceContext, Depends(require_started)]) -> Iterator[Session]:
    """A database session committed when the handler returns, before the answer is sent.

    ``SessionDep`` uses ``scope="function"``: the commit runs when the handler
    returns, so a commit that fails becomes the answer instead of following an
    acknowledged one. A refusal raised by the handler rolls everything back.
    """
    with ctx.db.session() as s:
        yield s


CtxDep = Annotated[ServiceContext, Depends(require_started)]
RawCtxDep = Annotated[ServiceContext, Depends(get_ctx)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
SessionDep = Annotated[Session, Depends(get_session, scope="function")]

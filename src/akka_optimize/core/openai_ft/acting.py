"""Where an OpenAI-compatible request acts (issue 51): the project a write happens in,
and a route's work run in one state-store transaction (a refusal rolls it back: it stores
nothing). :mod:`akka_optimize.service.routers.openai.common` reads the caller's project
from the request and answers in OpenAI's shape."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session

from ...errors import AkkaError
from ..access import rules as access
from ..auth import Principal
from ..context import ServiceContext
from .errors import OpenAIError

SessionWork = Callable[[Session], Any]
"""A route's work: given an open session, returns the answer's JSON value."""


def acting_project(s: Session, principal: Principal, name: str | None) -> str:
    """The name of the project a write happens in: ``name``, the project the caller acts
    in (its token's, else the ``OpenAI-Project`` header's; None for an admin token without
    the header).

    Raises:
        OpenAIError: an admin token without ``OpenAI-Project`` (``missing_project``), or a
            project that does not exist (404 ``project_not_found``, param ``project``).
    """
    if name is None:
        raise OpenAIError(
            "This token acts in every project; name the project with the OpenAI-Project header "
            "(the openai SDK's project= option), or use a project token.",
            "project",
            "missing_project",
        )
    try:
        return access.find_project(s, name, principal).name
    except AkkaError as exc:
        raise OpenAIError(exc.message, "project", "project_not_found", 404) from None


def in_transaction(ctx: ServiceContext, work: SessionWork) -> Any:
    """``work(session)`` in one transaction, committed when it returns, rolled back when it
    raises (its refusals propagate). Blocks on the state store: an async route calls it
    in the thread pool."""
    with ctx.db.session() as s:
        return work(s)

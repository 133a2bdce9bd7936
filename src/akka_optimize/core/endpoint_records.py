"""Endpoint records (:mod:`.endpoints`): the service's endpoint manager, the serving
limits, finding an endpoint the caller sees, its API view, a new record, and the refusal
of an endpoint no quota could ever admit."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..db.models.projects import Project
from ..db.models.serving import Endpoint, EndpointModel
from ..errors import InvalidRequest, NotFound
from ..jobs.capacity import usage as capacity
from ..jobs.capacity.pools import serving_pool
from ..serving.manager import EndpointManager, idle_for
from .access import rules as access
from .auth import Principal
from .context import ServiceContext


def limits(ctx: ServiceContext) -> Any:
    return ctx.deployment().serving


def _placement(ctx: ServiceContext) -> tuple[Any, str]:
    """Where serving workers run: the Ray executor when the deployment names one (each
    reserving one device of the serving pool's kind), else a subprocess here."""
    executor = ctx.executor
    if executor is None or getattr(executor, "name", "local") == "local":
        return None, "cpu"
    dep = ctx.deployment()
    prof = dep.profile(serving_pool(dep).deviceProfile)
    return executor, prof.kind if prof is not None else "cpu"


def manager(ctx: ServiceContext) -> EndpointManager:
    """The service's endpoint manager (created on first use)."""
    m = ctx.endpoints
    if m is None:
        m = ctx.endpoints = EndpointManager(
            ctx.db, ctx.settings, ctx.store, limits(ctx), ctx.forker
        )
        m.placement = lambda: _placement(ctx)
        m.admit = lambda endpoint_id: capacity.endpoint_may_start(
            ctx.db, ctx.deployment(), endpoint_id
        )
    return m


def refuse_endpoint_claim(ctx: ServiceContext, project: str) -> None:
    """Refuse an endpoint of ``project`` (a name) whose claim no quota or pool could ever
    admit (issue 22).

    Raises:
        InvalidRequest: ``quota_exceeded``, naming the quota or the pool.
    """
    dep = ctx.deployment()
    n = capacity.endpoint_devices(dep)
    pool = capacity.serving_pool(dep).name
    refused = capacity.refusal(
        dep, project, {pool: n} if n else {}, capacity.claim_words({pool: n}, False), "model"
    )
    if refused is not None:
        raise refused


def find_endpoint(s: Session, key: str, principal: Principal | None = None) -> Endpoint:
    """The endpoint with ID ``key`` or the only one whose ID starts with it, among those of
    the projects ``principal`` sees (every endpoint when None).

    Raises:
        NotFound: no visible endpoint matches. InvalidRequest: the prefix matches several.
    """
    pid = access.project_id(principal, s)
    ep = s.get(Endpoint, key)
    if ep is not None and pid in (None, ep.project_id):
        return ep
    q = select(Endpoint).where(Endpoint.id.startswith(key.lower(), autoescape=True))
    if pid is not None:
        q = q.where(Endpoint.project_id == pid)
    found = list(s.scalars(q.limit(5)))
    if not found:
        raise NotFound(
            f"No endpoint {key!r}; `training endpoints list` shows them.", field="endpoint"
        )
    if len(found) > 1:
        raise InvalidRequest(
            f"Endpoint ID prefix {key!r} is ambiguous: it matches "
            f"{', '.join(e.id for e in found)}; give more characters.",
            field="endpoint",
        )
    return found[0]


def models(s: Session, ep: Endpoint) -> list[EndpointModel]:
    return list(
        s.scalars(
            select(EndpointModel)
            .where(EndpointModel.endpoint_id == ep.id)
            .order_by(EndpointModel.id)
        )
    )


def view(s: Session, ep: Endpoint, ctx: ServiceContext) -> dict[str, Any]:
    """The API shape of an endpoint."""
    proj = s.get(Project, ep.project_id)
    rows = models(s, ep)
    # a STARTING endpoint says what its model is doing (F111); its queue position is
    # only news while it waits
    activity = ep.activity
    if ep.state == "QUEUED" and not activity:
        activity = manager(ctx).queue_line(ep.id)
    return {
        "id": ep.id,
        "projectId": ep.project_id,
        "projectName": proj.name if proj else None,
        "state": ep.state,
        "activity": activity,
        "error": ep.error,
        "baseModel": ep.base_model,
        "engine": ep.engine,
        "models": [
            {
                "model": r.served_name,
                "kind": r.kind,
                "ref": r.ref,
                "pinned": r.pinned,
                "rank": r.rank,
                "instructions": r.instructions,
                "checks": r.checks,
            }
            for r in rows
        ],
        "instructions": rows[0].instructions if rows else None,
        "checks": {r.served_name: r.checks for r in rows if r.kind == "adapter"},
        "openaiBaseUrl": f"/v1/training/endpoints/{ep.id}/openai/v1",
        "idleSeconds": idle_for(ep),
        "createdAt": ep.created_at.isoformat() if ep.created_at else None,
    }


def new_endpoint(
    s: Session, ctx: ServiceContext, project_id: str, base_key: str, row: dict[str, Any]
) -> Endpoint:
    """Add an endpoint record (``QUEUED``) serving the one model ``row`` describes."""
    ep = Endpoint(
        id=uuid.uuid4().hex,
        project_id=project_id,
        state="QUEUED",
        base_model=base_key,
        engine=limits(ctx).engine,
    )
    s.add(ep)
    s.flush()
    s.add(EndpointModel(endpoint_id=ep.id, **row))
    return ep

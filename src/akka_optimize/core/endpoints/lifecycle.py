"""An endpoint's life (seeds/000 "Endpoints reachable from your machine", seeds/001
endpoint changes; FEATURES F110–F120), without HTTP: what a model reference becomes on
an endpoint, creating, listing and deleting endpoints, detaching a served version, and
marking endpoints stopped when the service restarts
(:mod:`akka_optimize.service.routers.endpoints.routes` holds the routes)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ...catalog.cache import ready_model_dir
from ...db.models.projects import Project
from ...db.models.serving import Endpoint, EndpointModel
from ...errors import InvalidRequest, NotFound
from ...refs import parse_ref
from ..access import rules as access
from ..auth import Principal
from ..context import ServiceContext
from .records import (
    find_endpoint,
    limits,
    manager,
    models,
    new_endpoint,
    refuse_endpoint_claim,
    view,
)


def mark_stopped_after_restart(ctx: ServiceContext) -> None:
    """At start-up: endpoints a previous process served (``QUEUED``, ``STARTING``,
    ``READY``) become ``STOPPED`` (their next request starts them), and a post-deploy
    check the restart interrupted (``RUNNING``) is cleared to run again when the endpoint
    next starts. Creates the endpoint manager."""
    manager(ctx)
    with ctx.db.session() as s:
        for ep in s.scalars(
            select(Endpoint).where(Endpoint.state.in_(("QUEUED", "STARTING", "READY")))
        ):
            ep.state, ep.activity = "STOPPED", "the service restarted; the next request starts it"
        for row in s.scalars(select(EndpointModel).where(EndpointModel.checks.is_not(None))):
            if (row.checks or {}).get("state") == "RUNNING":
                row.checks = None


def resolve_model(
    s: Session, ctx: ServiceContext, ref: str, project: Project | None, principal: Principal
) -> tuple[dict[str, Any], str, Project]:
    """What the model reference ``ref`` becomes on an endpoint: ``(row, base key,
    project)``, the :class:`EndpointModel` fields (``kind``, ``rank``, ``ref``,
    ``pinned``, ``served_name``, ``instructions``), the base model it runs on
    (``REPO:vN``, or the repository when the adapter's base names no version) and the
    project the endpoint belongs to (an adapter's own when ``project`` is None).

    Raises:
        NotFound: ``ref`` names nothing the caller sees. Forbidden: another project's
            adapter. InvalidRequest: (``field="model"``) no project for a base model; an
            adapter above ``serving.maxLoraRank`` (``rank_too_large``).
    """
    rv = access.resolve(
        principal, s, "model", ref, project.name if project else None, field="model"
    )
    work = "an endpoint of project {project} serves"
    project = access.project_of_model(
        principal, s, rv, project, "endpoints.create", work=work, field="model"
    )
    if rv.source == "adapter":
        rank = rv.metadata.get("rank") or (rv.metadata.get("lora") or {}).get("rank")
        if rank is None:
            from ...serving.engine import adapter_rank  # lazy: guarded

            rank = adapter_rank(manager(ctx).adapter_dir(s, rv.pinned))
        limit = limits(ctx).maxLoraRank
        if rank is not None and int(rank) > limit:
            raise InvalidRequest(
                f"{rv.repo}:v{rv.version} is an adapter of rank {rank}, above the largest rank "
                f"an endpoint of this deployment loads ({limit}; `training endpoints info`).",
                field="model",
                code="rank_too_large",
            )
        b = parse_ref(rv.base_model or "")
        base_key = f"{b.repo}:v{b.version}" if b.version else b.repo
        row = {"kind": "adapter", "rank": int(rank) if rank is not None else None}
    else:
        base_key = f"{rv.repo}:v{rv.version}"
        row = {"kind": "base", "rank": None}
    row.update(
        ref=ref,
        pinned=rv.pinned,
        served_name=f"{rv.repo}:v{rv.version}",
        instructions=rv.metadata.get("instructions")
        or (rv.metadata.get("annotations") or {}).get("instructions"),
    )
    return row, base_key, project


def create_endpoint(
    ctx: ServiceContext, s: Session, principal: Principal, model: str, project: str | None
) -> dict[str, Any]:
    """Create an endpoint serving ``model`` (in ``project``, a name or ID, when given),
    committed, and ask the manager to start it. Returns its API view (``QUEUED`` or
    later).

    Raises:
        Forbidden: a project token writing another project, or another project's adapter.
        NotFound / InvalidRequest: as :func:`resolve_model`; a base model that is not
            READY; ``quota_exceeded`` when no quota or pool could ever admit it.
    """
    found = None
    if project:
        access.check_project_key_write(principal, s, project, "endpoints.create")
        found = access.find_project(s, project, principal)
    row, base_key, owner = resolve_model(s, ctx, model, found, principal)
    ready_model_dir(s, ctx.settings, base_key)  # refuses a base model that is not READY
    refuse_endpoint_claim(ctx, owner.name)
    ep = new_endpoint(s, ctx, owner.id, base_key, row)
    s.commit()
    manager(ctx).request_start(ep.id)
    s.refresh(ep)
    return view(s, ep, ctx)


def list_endpoints(
    ctx: ServiceContext, s: Session, principal: Principal, project: str | None
) -> list[dict[str, Any]]:
    """API views of every endpoint of the projects ``principal`` sees, newest first (of
    ``project``, a name or ID, when given).

    Raises:
        NotFound: ``project`` names no project the caller sees.
    """
    q = select(Endpoint).order_by(Endpoint.created_at.desc())
    if project:
        q = q.where(Endpoint.project_id == access.find_project(s, project, principal).id)
    pid = access.project_id(principal, s)
    if pid is not None:
        q = q.where(Endpoint.project_id == pid)
    return [view(s, e, ctx) for e in s.scalars(q)]


def delete_endpoint(
    ctx: ServiceContext, s: Session, principal: Principal, endpoint_id: str
) -> dict[str, Any]:
    """Delete an endpoint (ID or unambiguous prefix), committed; its worker stops when no
    other endpoint uses its base model. Returns its API view as it was, ``state``
    ``DELETED``.

    Raises:
        NotFound / InvalidRequest: as :func:`~.endpoint_records.find_endpoint`.
    """
    ep = find_endpoint(s, endpoint_id, principal)
    out = view(s, ep, ctx)
    m = manager(ctx)
    others = s.scalars(
        select(Endpoint.id).where(Endpoint.base_model == ep.base_model, Endpoint.id != ep.id)
    ).first()
    for r in models(s, ep):
        if r.kind == "adapter":
            m.detach(ep.id, r.served_name)
        s.delete(r)
    s.delete(ep)
    # Committed before the manager writes in its own session (SQLite allows one writer),
    # and nothing is read afterwards: a read would begin a new writing transaction on
    # this session and hold the lock the manager's session then waits on.
    s.commit()
    if others is None:
        m.stop_base(ep.base_model, "deleted")
    out["state"] = "DELETED"
    return out


def detach_model(
    ctx: ServiceContext, s: Session, principal: Principal, endpoint_id: str, ref: str
) -> dict[str, Any]:
    """Detach the version ``ref`` names (any reference to it, resolved in the endpoint's
    project) from the endpoint. Returns the endpoint's API view after.

    Raises:
        NotFound: (``field="ref"``) ``ref`` names no version the caller sees, or one the
            endpoint does not serve; no such endpoint.
    """
    ep = find_endpoint(s, endpoint_id, principal)
    proj = s.get(Project, ep.project_id)
    # among the versions the caller sees: another project's reads as missing (issue 48)
    rv = access.resolve(principal, s, "model", ref, proj.name if proj else None, field="ref")
    rows = [r for r in models(s, ep) if r.pinned == rv.pinned]
    if not rows:
        raise NotFound(f"Endpoint {ep.id} does not serve {rv.pinned}.", field="ref")
    for r in rows:
        if r.kind == "adapter":
            manager(ctx).detach(ep.id, r.served_name)
        s.delete(r)
    s.flush()
    return view(s, ep, ctx)

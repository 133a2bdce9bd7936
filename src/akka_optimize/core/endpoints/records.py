"""Endpoint records (:mod:`.endpoints`): the service's endpoint manager, the serving
limits, finding an endpoint the caller sees, its API view, a new record, the refusal
of an endpoint no quota could ever admit, one look at its worker, and the served name a
request's ``model`` refers to."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ...db.models.projects import Project
from ...db.models.serving import Endpoint, EndpointModel
from ...errors import InvalidRequest, NotFound
from ...jobs.capacity import usage as capacity
from ...jobs.capacity.pools import serving_pool
from ...refs import parse_ref
from ...registry.resolution import resolve_ref
from ...serving.manager import EndpointManager, idle_for
from ..access import rules as access
from ..auth import Principal
from ..context import ServiceContext


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


def poll_worker(ctx: ServiceContext, endpoint_id: str) -> tuple[Any, list[str]]:
    """One look at endpoint ``endpoint_id`` (reads the state store: an async route calls
    it in the thread pool): ``(worker, names)``, its ready worker and served names (the
    base model last when no row serves it), or ``(None, names)`` when it is not ready,
    after asking a stopped (or READY but workerless) endpoint to start.

    Raises:
        InvalidRequest: ``endpoint_failed`` for a FAILED endpoint (naming its error).
            NotFound: no such endpoint.
    """
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


def visible_endpoint_id(ctx: ServiceContext, key: str, principal: Principal) -> str:
    """The full ID of the endpoint ``key`` (ID or unambiguous prefix) names among those
    ``principal`` sees, read in its own session (an async route calls it in the thread
    pool: a session on the event loop would stall every request, issue 48 item 1).

    Raises:
        NotFound / InvalidRequest: as :func:`find_endpoint`.
    """
    with ctx.db.session() as s:
        return find_endpoint(s, key, principal).id

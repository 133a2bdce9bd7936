"""The endpoint that answers OpenAI's ``POST /v1/chat/completions`` on the service
(issue 51 item 4; :mod:`akka_optimize.service.routers.openai.chat` holds the route).

``model`` is a fine-tuned model (``ft:BASE:SUFFIX:RUN``), one of its checkpoints
(``…:ckpt-step-N``: the snapshot's adapter, registered as a version of the job's model on
first use) or any registry reference of a model version the caller sees. The request goes
to an endpoint of the model's project serving that version, created and started when none
exists.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from ...catalog.cache import ready_model_dir
from ...db.models.jobs import Run, Snapshot
from ...db.models.serving import Endpoint, EndpointModel
from ...errors import AkkaError
from ...jobs.results import register
from ..access import rules as access
from ..auth import Principal
from ..context import ServiceContext
from ..endpoints.lifecycle import resolve_model
from ..endpoints.records import manager, new_endpoint, refuse_endpoint_claim
from .errors import OpenAIError
from .views import parse_ft_name, record


def _not_found(model: str, why: str) -> OpenAIError:
    return OpenAIError(
        f"The model {model!r} does not exist: {why}.", "model", "model_not_found", 404
    )


def pinned_model(
    ctx: ServiceContext, s: Session, principal: Principal, project: str | None, model: str
) -> str:
    """The pinned registry version (``NS/NAME@sha256:…``) ``model`` names (module
    docstring); a checkpoint's adapter is registered on first use.

    Raises:
        OpenAIError: 404 ``model_not_found``: another project's job, a job that has not
            succeeded, a checkpoint that kept no adapter, or a reference to nothing visible.
    """
    ft = parse_ft_name(model)
    if ft is None:
        try:
            return access.resolve(principal, s, "model", model, project, field="model").pinned
        except AkkaError as exc:
            raise _not_found(model, exc.message) from None
    run = s.get(Run, ft[0])
    if run is None or record(run) is None or project not in (None, run.project):
        raise _not_found(model, "no such fine-tuning job")
    if ft[1] is None:
        if not run.registered_model:
            raise _not_found(
                model, f"job ftjob-{run.id} has not succeeded (its run is {run.state})"
            )
        return run.registered_model
    snap = s.scalar(select(Snapshot).where(Snapshot.run_id == run.id, Snapshot.step == ft[1]))
    if snap is None or snap.adapter_key is None:
        raise _not_found(model, f"job ftjob-{run.id} kept no adapter at step {ft[1]}")
    if snap.model_version:
        return snap.model_version

    return register(ctx, s, run, snap, {"snapshot": f"step-{snap.step}"})


def endpoint_for(
    ctx: ServiceContext, principal: Principal, project: str | None, model: str
) -> tuple[str, str, bool]:
    """``(endpoint ID, served name, ready)`` of an endpoint serving ``model`` (a READY one
    first), created and started when none exists (committed at once, so the manager sees
    it); a stopped one is asked to start. Reads the state store: an async route calls it
    in the thread pool.

    Raises:
        OpenAIError: as :func:`pinned_model`; 503 ``endpoint_failed`` when the endpoint
            serving it FAILED. AkkaError: ``quota_exceeded`` when no quota or pool can
            ever admit an endpoint of the project; a base model that is not READY.
    """

    with ctx.db.session() as s:
        pinned = pinned_model(ctx, s, principal, project, model)
        owner = pinned.split("/", 1)[0]
        rows = s.execute(
            select(Endpoint, EndpointModel)
            .join(EndpointModel, EndpointModel.endpoint_id == Endpoint.id)
            .where(EndpointModel.pinned == pinned)
            .order_by(Endpoint.created_at)
        ).all()
        mine = [(e, r) for e, r in rows if access.find_project(s, e.project_id).name == owner]
        live = [(e, r) for e, r in mine if e.state != "FAILED"]
        if live:
            ep, row = next(((e, r) for e, r in live if e.state == "READY"), live[0])
            eid, served, state = ep.id, row.served_name, ep.state
        elif mine:
            raise OpenAIError(
                f"The endpoint serving {model} failed: {mine[-1][0].error}",
                "model",
                "endpoint_failed",
                503,
            )
        else:
            proj = access.find_project(s, owner)
            row_spec, base_key, proj = resolve_model(s, ctx, pinned, proj, principal)
            ready_model_dir(s, ctx.settings, base_key)
            refuse_endpoint_claim(ctx, proj.name)
            ep = new_endpoint(s, ctx, proj.id, base_key, row_spec)
            eid, served, state = ep.id, row_spec["served_name"], "QUEUED"
    m = manager(ctx)
    ready = state == "READY" and m.worker_for(eid) is not None
    if not ready and state in ("STOPPED", "QUEUED", "READY"):
        m.request_start(eid)
    return eid, served, ready

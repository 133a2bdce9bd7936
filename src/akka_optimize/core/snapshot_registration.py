"""Registering a kept snapshot's adapter as a model version, while its run trains or
after (seeds/001 "Other changes"; F050), without HTTP
(:mod:`akka_optimize.service.routers.run_records` holds the route)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..db.models.jobs import Snapshot
from ..errors import Conflict, InvalidRequest, NotFound
from ..jobs import views
from ..jobs.results import model_name_of, register
from ..refs import validate_name
from .access import rules as access
from .auth import Principal
from .context import ServiceContext


def register_snapshot_adapter(
    ctx: ServiceContext,
    s: Session,
    principal: Principal,
    run_id: str,
    name: str,
    body: dict[str, Any],
) -> dict[str, Any]:
    """Register the adapter of run ``run_id``'s snapshot ``name`` (``step-N`` or ``N``) as
    a version of ``body["modelName"]`` (the run's model name by default, in the run's
    project). Registering the same snapshot under the same name again answers the same
    version. Returns ``{"registrationId": "RUN@step-N:NAME", "run", "snapshot": "step-N",
    "state": "REGISTERED", "model": the pinned version}``.

    Raises:
        NotFound: no such run the caller sees, or no such snapshot (``snapshot``).
        Forbidden: another project's token (``snapshots.register``).
        InvalidRequest: a field other than ``modelName``; a bad ``modelName``.
        Conflict: the snapshot kept no adapter (``execution.keepAdapters``), or the
            registry refuses the name (F049).
    """
    run = access.find_run(principal, s, run_id)
    access.check_project_write(principal, run.project, "snapshots.register")
    unknown = sorted(set(body) - {"modelName"})
    if unknown:
        raise InvalidRequest(f"{unknown[0]}: not a field here (only modelName).", field=unknown[0])
    model_name = run.model_name
    if body.get("modelName") is not None:
        model_name = validate_name(body["modelName"], "modelName")
    step = name.removeprefix("step-")
    snap = s.scalar(
        select(Snapshot).where(Snapshot.run_id == run.id, Snapshot.step == int(step))
    ) if step.isdigit() else None  # fmt: skip
    if snap is None:
        have = ", ".join(x["name"] for x in views.snapshots(s, run)) or "none yet"
        raise NotFound(
            f"Run {run.id} has no snapshot {name!r}; its snapshots: {have}.", field="snapshot"
        )
    if snap.adapter_key is None:
        raise Conflict(
            f"Snapshot step-{snap.step} of run {run.id} kept no adapter (it was not among "
            "execution.keepAdapters); register one that `training runs snapshots` lists with "
            "an adapter stored.",
            field="snapshot",
        )

    already = snap.model_version
    if already and model_name_of(already) == model_name:
        pinned = already
    else:
        pinned = register(ctx, s, run, snap, {"snapshot": f"step-{snap.step}"}, model_name)
    return {
        "registrationId": f"{run.id}@step-{snap.step}:{model_name}",
        "run": run.id,
        "snapshot": f"step-{snap.step}",
        "state": "REGISTERED",
        "model": pinned,
    }

"""Supervised runs (``method: sft``): the first kind of job, and how one starts.

:data:`SUPERVISED` declares the kind (:mod:`akka_optimize.jobs.kinds`): its spec comes from
:func:`akka_optimize.jobs.mapping.build_spec`, its worker runs
:func:`akka_optimize.jobs.training.train`, and its own events are ``save``
(:func:`akka_optimize.jobs.saves.record_save`) and ``completed``
(:func:`akka_optimize.jobs.results.complete`, which registers the model). :func:`start_run`
records a run from a resolved plan; it waits ``QUEUED`` until the scheduler starts it.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..db.models.jobs import Run
from ..errors import Conflict, InvalidRequest
from . import states as S
from .branches import branch_origin, record_origin
from .kinds import JobKind, register_kind, registered_kinds
from .mapping import build_spec, job_fields
from .results import complete
from .saves import record_save
from .scheduler import wake
from .views import run_view

SUPERVISED = register_kind(
    JobKind(
        name="sft",
        worker="akka_optimize.jobs.training:train",
        build_spec=build_spec,
        events={"save": record_save, "completed": complete},
    )
)
"""The supervised kind, registered when this module is imported."""


def start_run(ctx: Any, session: Session, resolved: Any, principal: Any = None) -> dict[str, Any]:
    """Record a run from a resolved plan; it waits in ``QUEUED`` until the scheduler starts it.

    A repeated ``submissionId`` in the same project returns the existing run.
    """
    f = job_fields(resolved)
    if f["method"] not in registered_kinds():
        raise InvalidRequest(
            f"config.method {f['method']!r}: this release trains supervised (sft) runs only; "
            "a reinforcement plan passes a dry run but cannot start yet.",
            field="config.method",
            code="method_not_available",
        )
    _refuse_unsupported(f["resolved"], f)
    _refuse_unselected_base_model(ctx, session, f["base_model"])
    if f["submission_id"]:
        existing = session.scalar(
            select(Run).where(Run.project == f["project"], Run.submission_id == f["submission_id"])
        )
        if existing is not None:
            return run_view(session, existing)
    # resolve_run_plan has checked warmStartModelId and branchFrom; the origin is looked
    # up again (one query) because the branch's first snapshot is copied from it.
    origin = branch_origin(session, f["resolved"])
    run = Run(
        id=uuid.uuid4().hex[:16],
        project=f["project"],
        submission_id=f["submission_id"],
        method=f["method"],
        state=S.QUEUED,
        plan=f["plan"],
        resolved=f["resolved"],
        config_hash=f["config_hash"],
        base_model=f["base_model"],
        dataset=f["dataset"],
        validation_dataset=f["validation_dataset"],
        model_name=f["model_name"],
        device_kind=f["device_kind"],
        gpus=f["gpus"],
        results={},
        queue_reason="waiting for the scheduler",
    )
    session.add(run)
    session.flush()
    if origin is not None:
        record_origin(ctx.store, session, run, *origin)
        session.flush()
    wake(ctx)
    return run_view(session, run)


def _refuse_unselected_base_model(ctx: Any, session: Session, base_model: str) -> None:
    """Refuse a run whose base model nobody selected (or whose selection failed): it
    would wait in ``QUEUED`` for a selection no one started. A model still fetching is
    fine; the run waits for it. A READY model whose catalog LoRA targets match none of its
    modules is refused (jobs/lora_targets.py)."""
    from ..catalog.cache import ready_model_dir
    from .lora_targets import refuse_unmatched_targets

    try:
        path, entry = ready_model_dir(session, ctx.settings, base_model)
    except Conflict as exc:
        if exc.code in ("base_model_not_selected", "base_model_failed"):
            raise InvalidRequest(exc.message, field="baseModel", code=exc.code) from exc
        return
    refuse_unmatched_targets(path, entry)


def _refuse_unsupported(plan: dict[str, Any], f: dict[str, Any]) -> None:
    """Refuse (400, naming the field) what the plan accepts but this release cannot train,
    rather than start a run that silently ignores it."""
    unsupported = [
        ("smoke", plan.get("smoke"), "smoke runs are not available yet"),
    ]
    for field, value, why in unsupported:
        if value:
            raise InvalidRequest(
                f"{field}: {why}; remove it to train from the base model.",
                field=field,
                code="not_available",
            )
    if f["device_kind"] == "cuda" and f["gpus"] > 1:
        raise InvalidRequest(
            f"execution.gpus {f['gpus']}: the local executor trains on one device; "
            "set execution.gpus to 1.",
            field="execution.gpus",
            code="not_available",
        )

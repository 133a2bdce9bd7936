"""Supervised runs (``method: sft``): the first kind of job, and how one starts.

:data:`SUPERVISED` declares the kind (:mod:`akka_optimize.jobs.kinds`): its spec comes from
:func:`akka_optimize.jobs.mapping.build_spec`, its worker runs
:func:`akka_optimize.jobs.training.train`, and its own events are ``save``
(:func:`akka_optimize.jobs.saves.record_save`) and ``completed``
(:func:`akka_optimize.jobs.results.complete`, which registers the model), and ``checks``
when a check before the first update fails (:func:`record_checks`). :func:`start_run`
records a run from a resolved plan; it waits ``QUEUED`` until the scheduler starts it.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ..db.models.jobs import Run, RunAttempt
from ..errors import Conflict
from . import states as S
from .admission import accepted, admit, claims
from .branches import branch_origin, record_origin
from .context import JobContext
from .kinds import JobKind
from .mapping import build_spec, job_fields
from .preparation import record_prepared
from .results import complete
from .saves import record_save
from .scheduler import wake
from .views import run_view


def record_checks(
    ctx: JobContext, s: Session, run: Run, _att: RunAttempt, ev: dict[str, Any]
) -> None:
    """A ``checks`` event: the values of the checks before the first update, sent when one
    failed (the ``failed`` event follows), so ``runs get --checks`` shows what was measured."""
    checks = [c for c in ev.get("checks") or [] if isinstance(c, dict)]
    passed = all(bool(c.get("passed")) for c in checks)
    run.results = {**(run.results or {}), "checks": checks, "checksPassed": passed}


def _prepared(ctx: JobContext, s: Session, run: Run, att: RunAttempt, ev: dict[str, Any]) -> None:
    """A ``prepared`` event: the rows are tokenized; the scheduler may claim the devices."""
    record_prepared(ctx, s, run, att, ev)
    wake(ctx)


SUPERVISED = JobKind(
    name="sft",
    worker="akka_optimize.jobs.training:train",
    build_spec=build_spec,
    events={
        "save": record_save,
        "completed": complete,
        "checks": record_checks,
        "prepared": _prepared,
    },
)
"""The supervised kind, listed in :data:`akka_optimize.core.job_kinds.KINDS`."""


def start_run(
    ctx: JobContext, session: Session, resolved: Any, principal: Any = None
) -> dict[str, Any]:
    """Record a run from a resolved plan; it waits in ``QUEUED`` until the scheduler starts it.

    A repeated ``submissionId`` in the same project returns the existing run.

    Raises:
        InvalidRequest, Conflict: :func:`akka_optimize.jobs.admission.admit` refuses the
            plan (the first refusal its dry run reports); nothing is created.
    """
    f = job_fields(resolved)
    admit(ctx, session, resolved)  # the refusals a dry run reports, checked the same way
    f["resolved"].update(accepted(ctx, session, f))  # what the run's kind pinned
    f["resolved"]["claims"] = claims(ctx, f)  # the devices it will hold (jobs/capacity/usage.py)
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
    try:
        with session.begin_nested():
            session.add(run)
            session.flush()
    except IntegrityError:
        # A concurrent request with the same submissionId won the insert: answer its run.
        existing = session.scalar(
            select(Run).where(Run.project == f["project"], Run.submission_id == f["submission_id"])
        )
        if existing is None or not f["submission_id"]:
            raise Conflict(
                "A concurrent request created this run; retry.", field="submissionId"
            ) from None
        return run_view(session, existing)
    if origin is not None:
        record_origin(ctx.store, session, run, *origin)
        session.flush()
    wake(ctx)
    return run_view(session, run)

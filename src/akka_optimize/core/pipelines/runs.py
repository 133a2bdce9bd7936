"""A recorded pipeline moving on (:mod:`akka_optimize.core.pipelines.records`): the
scheduler's pass that notes each stage's job and starts the next stage, and cancel and
resume."""

from __future__ import annotations

import copy
import logging
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ...db.base import utcnow
from ...db.models.jobs import Pipeline, Run
from ...errors import AkkaError, Conflict
from ...jobs import control
from ...jobs import states as S
from ...jobs.scheduler import wake
from ..context import ServiceContext
from .shape import fill, references
from .stages import check_stage

log = logging.getLogger("akka_optimize.pipelines")

ACTIVE = (S.QUEUED, S.PREPARING, S.RUNNING, S.PAUSED)
"""Job states in which a stage is still under way (a paused run may resume)."""


def _output(run: Run, kind: str) -> Any:
    if kind == "curate":
        return (run.results or {}).get("dataset")
    if kind == "train":
        return run.registered_model
    res = run.results or {}
    return {"mean": res.get("mean"), "stderr": res.get("stderr"), "count": res.get("count")}


def advance(ctx: ServiceContext, s: Session, p: Pipeline) -> None:
    """Move pipeline ``p`` on: note its current stage's job state; when that job
    succeeded, record its output and start the next stage; end the pipeline when a stage
    failed, was cancelled or could not start, or when every stage succeeded."""
    records = copy.deepcopy(p.stages)
    try:
        for rec in records:
            if rec["state"] == S.SUCCEEDED:
                continue
            if rec["job"] is None:
                outputs = [r["output"] for r in records]
                refs = references([r["descriptor"] for r in records])[rec["index"]]
                filled = fill(rec["descriptor"], refs, outputs)
                try:
                    with s.begin_nested():
                        got = check_stage(ctx, s, None, filled, p.project, start=True)
                except AkkaError as exc:
                    rec["state"] = S.FAILED
                    rec["failureReason"] = exc.message
                    _end(
                        p,
                        S.FAILED,
                        f"Stage {rec['name']} ({rec['kind']}) could not start: {exc.message}",
                    )
                    return
                rec.update(job=got["job"], jobConfigHash=got["configHash"], state=S.QUEUED)
                return
            run = s.get(Run, rec["job"])
            if run is None:
                rec["state"] = S.FAILED
                _end(
                    p,
                    S.FAILED,
                    f"Stage {rec['name']} ({rec['kind']}): its job {rec['job']} is gone.",
                )
                return
            rec["state"] = run.state
            if run.state in ACTIVE:
                return
            if run.state != S.SUCCEEDED:
                rec["failureReason"] = run.failure_reason
                why = f": {run.failure_reason}" if run.failure_reason else "."
                state = S.CANCELLED if run.state == S.CANCELLED else S.FAILED
                _end(p, state, f"Stage {rec['name']} ({rec['kind']}) ended {run.state}{why}")
                return
            rec["output"] = _output(run, rec["kind"])
        _end(p, S.SUCCEEDED, None)
    finally:
        p.stages = records


def _end(p: Pipeline, state: str, reason: str | None) -> None:
    p.state = state
    p.failure_reason = reason
    p.finished_at = utcnow()


def advance_all(ctx: ServiceContext) -> None:
    """The scheduler's pass over running pipelines (:func:`akka_optimize.jobs.scheduler.on_tick`);
    each pipeline in its own transaction, so one that fails to move does not stop the others."""
    with ctx.db.session() as s:
        ids = list(s.scalars(select(Pipeline.id).where(Pipeline.state == S.RUNNING)))
    for pid in ids:
        try:
            with ctx.db.session() as s:
                p = s.get(Pipeline, pid)
                if p is not None and p.state == S.RUNNING:
                    advance(ctx, s, p)
        except Exception:
            log.exception("pipeline %s could not advance", pid)


def cancel_pipeline(ctx: ServiceContext, s: Session, p: Pipeline) -> None:
    """Cancel a running pipeline: its current stage's job is cancelled, the pipeline ends
    ``CANCELLED`` at once (``resume`` starts it again from that stage).

    Raises:
        Conflict: the pipeline has already ended.
    """

    if p.state != S.RUNNING:
        raise Conflict(f"Pipeline {p.id} has already ended {p.state}.", field="pipeline")
    records = copy.deepcopy(p.stages)
    for rec in records:
        if rec["job"] and rec["state"] not in S.TERMINAL:
            run = s.get(Run, rec["job"])
            if run is not None and run.state not in S.TERMINAL:
                control.request_control(ctx, s, run, "cancel")
            rec["state"] = S.CANCELLED
    p.stages = records
    _end(p, S.CANCELLED, "Cancelled on request.")


def resume_pipeline(ctx: ServiceContext, s: Session, p: Pipeline) -> None:
    """Start a failed or cancelled pipeline again from its first unfinished stage: that
    stage gets a new job (its earlier one is kept in ``earlierJobs``).

    Raises:
        Conflict: the pipeline is running or has succeeded.
    """

    if p.state not in (S.FAILED, S.CANCELLED):
        raise Conflict(
            f"Pipeline {p.id} is {p.state}; only a failed or cancelled pipeline resumes.",
            field="pipeline",
        )
    records = copy.deepcopy(p.stages)
    for rec in records:
        if rec["state"] == S.SUCCEEDED:
            continue
        if rec["job"]:
            rec["earlierJobs"] = [*rec.get("earlierJobs", []), rec["job"]]
        rec.update(job=None, jobConfigHash=None, state="PENDING", failureReason=None)
    p.stages = records
    p.state, p.failure_reason, p.finished_at = S.RUNNING, None, None
    wake(ctx)

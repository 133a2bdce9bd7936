"""Control of a run from outside: cancel, pause and resume (seeds/001).

Queued or paused runs change at once; a run with a live worker is told through the answer
to its next event and stops at an update boundary (:mod:`akka_optimize.jobs.events`).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..db.models.jobs import Run, RunAttempt, Snapshot
from ..errors import Conflict, InvalidRequest
from . import states as S
from .context import JobContext
from .kinds import is_external
from .records import end_attempt, finish
from .scheduler import wake
from .views import run_view


def request_control(ctx: JobContext, session: Session, run: Run, action: str) -> dict[str, Any]:
    """``pause`` or ``cancel`` a run. Queued or paused runs change at once; active
    runs are told through their next event and stop at an update boundary."""
    if run.state in S.TERMINAL:
        done = {"pause": "paused", "cancel": "cancelled"}.get(action, action)
        raise Conflict(f"Run {run.id} is {run.state}; it cannot be {done}.", field="run")
    if action == "pause":
        if run.state == S.PAUSED:
            return run_view(session, run)
        if run.state == S.PREPARING:
            raise Conflict(f"Run {run.id} is tokenizing its rows; pause it once it is RUNNING.")
        if run.state == S.QUEUED:
            run.state = S.PAUSED
        else:
            run.control = "pause"
    elif action == "cancel":
        if run.state in (S.QUEUED, S.PAUSED):
            finish(run, S.CANCELLED)
        elif is_external(run.method):  # no process of ours to wait for: it ends now
            _cancel_attempts(session, run)
        else:
            run.control = "cancel"
    else:
        raise InvalidRequest(f"Unknown action {action!r}.", field="action")
    wake(ctx)
    return run_view(session, run)


def _cancel_attempts(session: Session, run: Run) -> None:
    """End an external run (:attr:`akka_optimize.jobs.kinds.JobKind.external`) and its
    running attempts ``CANCELLED`` at once: the service cannot see its worker, which may be
    gone. A live worker's next event is answered ``cancel`` and it stops."""
    running = session.scalars(
        select(RunAttempt).where(RunAttempt.run_id == run.id, RunAttempt.state == S.RUNNING)
    ).all()
    for att in running:
        end_attempt(run, att, S.CANCELLED)
    if not running:
        finish(run, S.CANCELLED)


def resume(ctx: JobContext, session: Session, run: Run, step: int | None) -> dict[str, Any]:
    """Queue a new attempt of a paused or failed run from a kept save (the newest by default)."""
    if run.state not in (S.PAUSED, S.FAILED):
        raise Conflict(
            f"Run {run.id} is {run.state}; only a PAUSED or FAILED run resumes.", field="run"
        )
    kept = session.scalars(
        select(Snapshot)
        .where(Snapshot.run_id == run.id, Snapshot.recoverable.is_(True))
        .order_by(Snapshot.step)
    ).all()
    if step is not None:
        if not any(s.step == step for s in kept):
            have = ", ".join(str(s.step) for s in kept) or "none"
            raise InvalidRequest(
                f"Run {run.id} has no resumable save at step {step}; resumable steps: {have}.",
                field="step",
            )
        run.resume_step = step
    else:
        run.resume_step = kept[-1].step if kept else None
    run.state = S.QUEUED
    run.control = None
    run.failure_reason = None
    run.finished_at = None
    run.queue_reason = (
        "waiting for a worker to claim it"
        if is_external(run.method)
        else "waiting for the scheduler"
    )
    wake(ctx)
    return run_view(session, run)

"""Recovery: runs whose worker is gone end ``FAILED`` with a sentence, never stuck ``RUNNING``.

Workers outlive the service process that launched them; at start :func:`recover` marks the
active runs, and each scheduler pass reaps the attempts whose process has exited without a
final event (:func:`reap_dead_workers`). A run with a kept save can then be resumed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..db.base import utcnow
from ..db.models.jobs import Run, RunAttempt
from . import states as S
from .address import UNREACHABLE_EXIT, gave_up_after, unreachable_sentence
from .context import JobContext
from .events import rank_reason
from .executor import Executor
from .records import finish


def recover(ctx: JobContext) -> None:
    """At service start: workers of the previous service process keep running when alive;
    the scheduler's first pass fails runs whose worker is gone."""
    with ctx.db.session() as s:
        for run in s.scalars(select(Run).where(Run.state.in_(S.ACTIVE))):
            run.phase_detail = (run.phase_detail or "") + " (service restarted)"


def reap_dead_workers(s: Session, executor: Executor, store: Any = None) -> None:
    """End every running attempt whose worker process has exited without a final event;
    its run ends ``FAILED`` (``CANCELLED`` when a cancel was pending) with a sentence naming
    the exit and how to resume, and the end of the worker's log as detail. A worker that
    gave up on the service (exit ``UNREACHABLE_EXIT``, or recorded in ``store`` when this
    service did not launch it and cannot read its exit code) gets the sentence saying so."""
    for att in s.scalars(select(RunAttempt).where(RunAttempt.state == S.RUNNING)):
        if att.pid is None or executor.alive(att.pid):
            continue
        run = s.get(Run, att.run_id)
        code = executor.exit_code(att.pid)
        window = None  # the retry window a worker that gave up recorded (read only then)
        if code in (None, UNREACHABLE_EXIT) and store is not None:
            window = gave_up_after(store, att.run_id, att.number)
            if window is not None:
                code = UNREACHABLE_EXIT
        att.state = S.FAILED
        att.exit_code = code
        att.ended_at = utcnow()
        if run is not None and run.state in S.ACTIVE:
            told = getattr(executor, "ended_sentence", None)  # e.g. an unreachable cluster
            finish(
                run,
                S.FAILED if run.control != "cancel" else S.CANCELLED,
                (told(code) if told else None)
                or rank_reason(run, att)  # a rank's own sentence
                or (
                    unreachable_sentence(window)
                    if code == UNREACHABLE_EXIT
                    else f"The worker process {_how(code)} at step {run.current_step} without "
                    f"reporting why{_resume_hint(run)}."
                ),
            )
            run.failure_detail = _tail(att.log_path) or run.failure_detail


def _how(code: int | None) -> str:
    if code is None:
        return "ended"
    return f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"


def _resume_hint(run: Run) -> str:
    if not run.last_saved_step:
        return ""
    return f"; resume it from step {run.last_saved_step} with `training runs resume {run.id}`"


def _tail(path: str | None, n: int = 20000) -> str | None:
    if not path or not Path(path).exists():
        return None
    return Path(path).read_text(errors="replace")[-n:]

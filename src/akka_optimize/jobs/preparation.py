"""Tokenizing a run's rows before it claims its devices (F071, seeds/001 "A supervised run
on more than one device tokenizes its rows before claiming GPUs").

A queued supervised run on several devices (``execution.gpus`` > 1) first gets a
preparation attempt: one worker process on the host's CPU, holding no device claim
(:func:`akka_optimize.jobs.capacity.claims.holds_devices`), that reads, tokenizes, masks
and packs the rows exactly as a rank would (:func:`akka_optimize.jobs.training._prepare`,
sending ``PREPARING`` with ``rowsDone``/``rowsTotal``) and stores them in the run's
prepared-rows file (:func:`rows_path`). Its ``prepared`` event puts the run back in the
queue in its place; the scheduler then claims the devices and starts the ranks, which read
the stored rows instead of tokenizing again. While it prepares, the run is ``PREPARING``:
a pause is refused (:mod:`akka_optimize.jobs.control`), a cancel is answered to its next
event and stops the tokenizing, and a preparation that reports nothing for the
deployment's ``service.startupTimeoutSeconds`` is stopped and fails the run with a
sentence (:func:`fail_stalled`). A run on one device keeps tokenizing after its claim.
"""

from __future__ import annotations

import datetime as dt
import pickle
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..db.base import utcnow
from ..db.models.jobs import Run, RunAttempt
from ..store import BlobStore
from . import states as S
from .capacity.claims import UNCLAIMED, as_aware
from .context import JobContext
from .records import end_attempt, finish
from .spec import JobSpec
from .training import CancelledWhileTokenizing, prepare

WORKER = "akka_optimize.jobs.preparation:prepare_rows"
"""The preparation attempt's worker function."""
DONE = "done"
"""``run.results["preparation"]`` once the rows are stored."""


def prepares_first(run: Run) -> bool:
    """Whether queued run ``run`` tokenizes its rows before it claims devices: a supervised
    run on more than one device whose rows are not stored yet."""
    return (
        run.method == "sft"
        and (run.gpus or 0) > 1
        and (run.results or {}).get("preparation") != DONE
    )


def rows_path(runs_dir: Path, run: Run) -> Path:
    """The run's prepared-rows file (a pickle of the rows, training and validation sets),
    under the service's ``runs_dir``."""
    return runs_dir / run.id / "prepared-rows.pkl"


def mark_preparing(run: Run) -> None:
    """``run`` now tokenizes its rows in a preparation attempt, holding no devices."""
    run.state = S.PREPARING
    run.results = {**(run.results or {}), "preparation": UNCLAIMED}
    run.queue_reason = None
    run.phase_detail = "tokenizing its rows before it claims devices"


def record_prepared(
    ctx: JobContext, s: Session, run: Run, att: RunAttempt, _ev: dict[str, Any]
) -> None:
    """A ``prepared`` event: the rows are stored; the run waits for its devices in its
    place in the queue (a cancel asked meanwhile ends it ``CANCELLED``). The ranks read the
    stored rows in :func:`akka_optimize.jobs.training._prepare`."""
    if run.control == "cancel":
        end_attempt(run, att, S.CANCELLED)
        return
    att.state = S.SUCCEEDED
    att.ended_at = utcnow()
    run.state = S.QUEUED
    run.control = None
    run.results = {**(run.results or {}), "preparation": DONE}
    run.queue_reason = run.phase_detail = "rows tokenized; waiting for its devices"


def stall_sentence(timeout_s: float) -> str:
    """The failure reason of a preparation that reported nothing for ``timeout_s``."""
    return (
        f"Tokenizing the rows reported no progress for {timeout_s:g} seconds (the "
        "deployment's service.startupTimeoutSeconds), so the run was stopped before it "
        "claimed any device."
    )


def fail_stalled(
    s: Session, timeout_s: float, executor: Any, now: dt.datetime | None = None
) -> None:
    """Stop every preparation attempt whose last event (or start) is more than
    ``timeout_s`` seconds old and fail its run with :func:`stall_sentence`."""
    now = as_aware(now or utcnow())
    for run in s.scalars(select(Run).where(Run.state == S.PREPARING)):
        if (run.results or {}).get("preparation") != UNCLAIMED:
            continue
        att = s.scalar(
            select(RunAttempt)
            .where(RunAttempt.run_id == run.id, RunAttempt.state == S.RUNNING)
            .order_by(RunAttempt.number.desc())
        )
        if att is None:
            finish(run, S.FAILED, stall_sentence(timeout_s))
            continue
        last = as_aware(att.last_event_at or att.started_at)
        if (now - last).total_seconds() <= timeout_s:
            continue
        if att.pid is not None:
            executor.kill(att.pid)
        end_attempt(run, att, S.FAILED, stall_sentence(timeout_s))


def prepare_rows(spec: JobSpec, store: BlobStore, events: Any, work: Path) -> dict[str, Any]:
    """The preparation attempt's worker: tokenizes the rows as a rank would and stores them
    at ``spec.extra["prepared_rows"]``; returns the final event, ``prepared`` (or
    ``cancelled`` when the service cancelled meanwhile)."""

    try:
        prepared = prepare(spec, store, events)
    except CancelledWhileTokenizing:
        return {"type": "cancelled"}
    if events.control == "cancel":
        return {"type": "cancelled"}
    path = Path(spec.extra["prepared_rows"])
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    with open(partial, "wb") as f:
        pickle.dump(prepared, f)
    partial.replace(path)
    return {"type": "prepared"}

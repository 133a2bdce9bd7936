"""Event intake: how the service applies a worker's events to the run record.

A worker posts each event with its attempt's token (:func:`authorize_attempt`);
:func:`handle_event` applies it and answers with the run's pending control request
(``pause`` or ``cancel``), which is how a running worker learns it should stop. The events
every kind of job sends are applied here; any other event type goes to the handler its kind
declared (:mod:`akka_optimize.jobs.kinds`), so this module never imports a kind.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..db.base import utcnow
from ..db.models.auth import hash_token
from ..db.models.jobs import Run, RunAttempt, RunMetric
from ..errors import AkkaError, NotFound
from . import states as S
from .context import JobContext
from .kinds import job_kind
from .records import end_attempt

log = logging.getLogger("akka_optimize.jobs")
SMOKE_KEYS = ("reproduction", "step", "threshold", "supervisedTokens")


def authorize_attempt(session: Session, run_id: str, number: int, token: str) -> RunAttempt:
    """The attempt a worker token belongs to. Raises NotFound / Conflict."""
    att = session.scalar(
        select(RunAttempt).where(RunAttempt.run_id == run_id, RunAttempt.number == number)
    )
    if att is None or not secrets.compare_digest(att.token_sha256, hash_token(token)):
        raise NotFound(f"Run {run_id} has no attempt {number} for this token.")
    return att


def handle_event(
    ctx: JobContext, session: Session, run: Run, att: RunAttempt, event: dict[str, Any]
) -> dict[str, Any]:
    """Apply one worker event; the answer carries the run's pending control request."""
    att.last_event_at = utcnow()
    if att.state in S.TERMINAL or run.state in S.TERMINAL and att.state != S.RUNNING:
        return {"control": "cancel"}
    apply_event(ctx, session, run, att, event)
    return {"control": run.control}


def apply_event(ctx: JobContext, s: Session, run: Run, att: RunAttempt, ev: dict[str, Any]) -> None:
    """Apply one event (``phase``, ``data``, ``metrics``, ``validation``, ``smoke`` (a smoke
    run's reading of its slice), ``warning``, ``failed``,
    ``paused``, ``cancelled``, or one of the run's kind: ``save`` and ``completed`` for a
    supervised run) to ``run``. An event type nobody handles is logged and ignored."""
    kind = ev.get("type")
    if kind == "phase":
        _phase(run, ev)
    elif kind == "data":
        run.results = {
            **(run.results or {}),
            "data": ev.get("train"),
            "validationData": ev.get("validation"),
        }
    elif kind in ("metrics", "validation", "smoke"):
        _measurement(s, run, att, kind, ev)
    elif kind == "warning":  # engine/sanity.py: shown by runs get and runs metrics
        entry = {k: v for k, v in ev.items() if k != "type"}
        warnings = [*(run.results or {}).get("warnings", []), entry]
        run.results = {**(run.results or {}), "warnings": warnings}
        if ev.get("code") == "unrecorded_save":  # jobs/training.py: a save that was not stored
            lost = sorted({*(run.results.get("unrecordedSaves") or []), int(ev["step"])})
            run.results = {**run.results, "unrecordedSaves": lost}
    elif kind == "failed" and ev.get("rank"):  # a rank other than 0: rank 0 or the reaper ends it
        if rank_reason(run, att) is None:
            first = {"attempt": att.number, "reason": str(ev.get("reason") or "")[:2000]}
            run.results = {**(run.results or {}), "rankFailure": first}
            run.failure_detail = ev.get("detail")
    elif kind == "failed":
        reason = ev.get("reason") or "The worker failed without a reason."
        cause = rank_reason(run, att) if reason.startswith(GENERIC_FAILURE) else None
        if cause is None:  # else the failing rank's detail stays
            run.failure_detail = ev.get("detail")
        end_attempt(run, att, S.FAILED, cause or reason)
    elif kind == "paused":
        end_attempt(run, att, S.PAUSED)
        run.finished_at = None
    elif kind == "cancelled":
        end_attempt(run, att, S.CANCELLED)
    else:
        handler = _kind_handler(run, str(kind))
        if handler is None:
            log.warning("run %s: ignored an event of unknown type %r", run.id, kind)
            return
        handler(ctx, s, run, att, ev)


GENERIC_FAILURE = "The worker failed: "
"""How :func:`akka_optimize.worker_events.failure_sentence` begins for an error that is not
one of the platform's own (on rank 0 of a run on several devices, typically the collective
that broke when another rank failed)."""


def rank_reason(run: Run, att: RunAttempt) -> str | None:
    """The sentence a rank other than 0 of attempt ``att`` reported when it failed ("Rank 1
    of 2: …"), or None. Rank 0's own failure sentence wins over it unless that one is
    generic (:data:`GENERIC_FAILURE`: the collective that broke when the other rank went);
    the reaper uses it when the workers exit without a final event."""
    got = (run.results or {}).get("rankFailure")
    if isinstance(got, dict) and got.get("attempt") == att.number:
        return str(got.get("reason") or "") or None
    return None


def _kind_handler(run: Run, event_type: str) -> Any:
    try:
        return job_kind(run.method).events.get(event_type)
    except AkkaError:  # a run of a kind this service no longer knows
        return None


def _phase(run: Run, ev: dict[str, Any]) -> None:
    if run.state in S.ACTIVE and ev.get("phase") in S.ACTIVE:
        run.state = ev["phase"]
    run.phase_detail = ev.get("detail") or str(ev.get("phase", "")).replace("_", " ")
    if "rowsTotal" in ev:  # jobs/training.py: PREPARING's completed and total rows (F071)
        counts = {"rowsDone": int(ev.get("rowsDone") or 0), "rowsTotal": int(ev["rowsTotal"])}
        run.results = {**(run.results or {}), "preparing": counts}
    if ev.get("adaptedModules"):
        run.results = {**(run.results or {}), "adaptedModules": ev["adaptedModules"]}
    if ev.get("judgeEndpoint"):  # an evaluation's model: judge (evals/worker.py)
        run.results = {**(run.results or {}), "judgeEndpoint": str(ev["judgeEndpoint"])[:64]}
    if ev.get("totalSteps"):
        run.total_steps = int(ev["totalSteps"])


def _measurement(s: Session, run: Run, att: RunAttempt, kind: str, ev: dict[str, Any]) -> None:
    step = int(ev.get("step", 0))
    values = {k: v for k, v in ev.items() if k not in ("type", "step")}
    s.add(RunMetric(run_id=run.id, attempt=att.number, kind=kind, step=step, values=values))
    if kind == "metrics":
        run.current_step = step
        run.phase_detail = "training"
        if ev.get("totalSteps"):
            run.total_steps = int(ev["totalSteps"])
    elif kind == "smoke":  # engine/smoke.py: the reading so far, shown while it trains
        run.results = {**(run.results or {}), "smoke": {k: values.get(k) for k in SMOKE_KEYS}}
        run.phase_detail = (
            f"smoke check: reproduction {float(values.get('reproduction') or 0):.3f} at step "
            f"{step} (threshold {values.get('threshold')})"
        )
    else:
        run.results = {**(run.results or {}), "validationLoss": ev.get("loss")}

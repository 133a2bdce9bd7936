"""Run records on the service side: start, read, control, events, and the scheduler.

The service never trains in its own process (DESIGN.md "Where a run executes"):
the scheduler thread launches one worker per attempt through an executor, and
the worker streams events back to :func:`handle_event`. A worker that dies
without a final event is noticed by the scheduler and its run ends ``FAILED``
with a sentence (never stuck ``RUNNING``); a paused or failed run with a kept
save resumes as a new attempt.
"""

from __future__ import annotations

import datetime as dt
import logging
import secrets
import shutil
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ..db.base import utcnow
from ..db.models.auth import ApiToken
from ..db.models.jobs import Run, RunAttempt, RunMetric, Snapshot
from ..errors import Conflict, InvalidRequest, NotFound
from ..service.auth import hash_token
from . import states as S
from .branches import branch_origin, record_origin
from .executor import Executor, LocalExecutor
from .mapping import job_fields
from .spec import JobSpec

log = logging.getLogger("akka_optimize.jobs")


# -- start ---------------------------------------------------------------------
def start_run(ctx: Any, session: Session, resolved: Any, principal: Any = None) -> dict[str, Any]:
    """Record a run from a resolved plan; it waits in ``QUEUED`` until the scheduler starts it.

    A repeated ``submissionId`` in the same project returns the existing run.
    """
    f = job_fields(resolved)
    if f["method"] != "sft":
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
    fine; the run waits for it."""
    from ..catalog.cache import ready_model_dir

    try:
        ready_model_dir(session, ctx.settings, base_model)
    except Conflict as exc:
        if exc.code in ("base_model_not_selected", "base_model_failed"):
            raise InvalidRequest(exc.message, field="baseModel", code=exc.code) from exc


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


def get_run(session: Session, run_id: str) -> Run:
    """The run with this ID or an unambiguous ID prefix. Raises NotFound / InvalidRequest."""
    run = session.get(Run, run_id)
    if run is not None:
        return run
    matches = session.scalars(select(Run).where(Run.id.startswith(run_id)).limit(3)).all()
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise NotFound(f"No run {run_id!r}.", field="run")
    raise InvalidRequest(
        f"The run ID prefix {run_id!r} matches several runs; give more of it.", field="run"
    )


# -- views ---------------------------------------------------------------------
def _iso(t: dt.datetime | None) -> str | None:
    return t.isoformat() if t else None


def run_view(session: Session, run: Run, *, settings: bool = False) -> dict[str, Any]:
    """A run in three parts: state, results and cost (seeds/001); settings on request."""
    end = run.finished_at or utcnow()
    start = run.started_at
    if start is not None and start.tzinfo is None:
        start = start.replace(tzinfo=dt.UTC)
    if end.tzinfo is None:
        end = end.replace(tzinfo=dt.UTC)
    wall = (end - start).total_seconds() if start else 0.0
    res = dict(run.results or {})
    view: dict[str, Any] = {
        "id": run.id,
        "project": run.project,
        "method": run.method,
        "baseModel": run.base_model,
        "dataset": run.dataset,
        "validationDataset": run.validation_dataset,
        "modelName": run.model_name,
        "configHash": run.config_hash,
        "state": run.state,
        "phase": run.phase_detail,
        "queueReason": run.queue_reason if run.state == S.QUEUED else None,
        "failure": run.failure_reason,
        "createdAt": _iso(run.created_at),
        "startedAt": _iso(run.started_at),
        "finishedAt": _iso(run.finished_at),
        "branchFrom": res.get("branchFrom"),
        "warmStartModelId": (run.resolved or {}).get("warmStartModelId"),
        "results": {
            "model": run.registered_model,
            "step": run.current_step,
            "totalSteps": run.total_steps,
            "lastSavedStep": run.last_saved_step,
            "finalLoss": res.get("finalLoss"),
            "meanLoss": res.get("meanLoss"),
            "validationLoss": res.get("validationLoss"),
            "adaptedModules": res.get("adaptedModules"),
            "tokensPerSecond": res.get("tokensPerSecond"),
            "data": res.get("data"),
            "epochModels": res.get("epochModels"),
            "unrecordedSaves": res.get("unrecordedSaves"),
        },
        "cost": {
            "device": run.device_kind,
            "gpus": run.gpus,
            "wallSeconds": round(wall, 1),
            "deviceSeconds": round(wall if run.device_kind == "cuda" else 0.0, 1),
            "trainedTokens": res.get("totalTokens"),
        },
    }
    if settings:
        view["settings"] = run.resolved
    return view


def list_runs(session: Session, project: str | None = None, limit: int = 100) -> list[dict]:
    """Newest runs first, optionally in one project."""
    q = select(Run).order_by(Run.created_at.desc()).limit(limit)
    if project:
        q = q.where(Run.project == project)
    return [run_view(session, r) for r in session.scalars(q)]


def metrics(session: Session, run: Run) -> dict[str, Any]:
    """Per-update metrics and validation records; a step retrained after a resume
    shows its newest attempt's values."""
    rows = session.scalars(
        select(RunMetric)
        .where(RunMetric.run_id == run.id)
        .order_by(RunMetric.attempt, RunMetric.id)
    ).all()
    out: dict[str, dict[int, dict[str, Any]]] = {"metrics": {}, "validation": {}}
    for m in rows:
        out.setdefault(m.kind, {})[m.step] = {**m.values, "step": m.step, "attempt": m.attempt}
    return {
        "run": run.id,
        "metrics": [out["metrics"][k] for k in sorted(out["metrics"])],
        "validation": [out["validation"][k] for k in sorted(out["validation"])],
        "finalLoss": (run.results or {}).get("finalLoss"),
        "meanLoss": (run.results or {}).get("meanLoss"),
    }


def snapshots(session: Session, run: Run) -> list[dict[str, Any]]:
    """Saves of a run, oldest first, with sizes, whether each is still resumable and
    whether its adapter is still stored (``execution.keepAdapters``)."""
    rows = session.scalars(
        select(Snapshot).where(Snapshot.run_id == run.id).order_by(Snapshot.step)
    ).all()
    return [
        {
            "run": run.id,
            "step": s.step,
            "name": f"step-{s.step}",
            "epoch": s.epoch,
            "epochEnd": s.epoch_end,
            "recoverable": s.recoverable,
            "hasAdapter": s.adapter_key is not None,
            "model": s.model_version,
            "bytes": {
                "state": s.state_bytes,
                "adapter": s.adapter_bytes,
                "total": s.state_bytes + s.adapter_bytes,
            },
            "createdAt": _iso(s.created_at),
        }
        for s in rows
    ]


# -- control -------------------------------------------------------------------
def request_control(ctx: Any, session: Session, run: Run, action: str) -> dict[str, Any]:
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
            _finish(run, S.CANCELLED)
        else:
            run.control = "cancel"
    else:
        raise InvalidRequest(f"Unknown action {action!r}.", field="action")
    wake(ctx)
    return run_view(session, run)


def resume(ctx: Any, session: Session, run: Run, step: int | None) -> dict[str, Any]:
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
    run.queue_reason = "waiting for the scheduler"
    wake(ctx)
    return run_view(session, run)


def _finish(run: Run, state: str, reason: str | None = None) -> None:
    run.state = state
    run.finished_at = utcnow()
    run.control = None
    if reason:
        run.failure_reason = reason


# -- events from workers -------------------------------------------------------
def authorize_attempt(session: Session, run_id: str, number: int, token: str) -> RunAttempt:
    """The attempt a worker token belongs to. Raises NotFound / Conflict."""
    att = session.scalar(
        select(RunAttempt).where(RunAttempt.run_id == run_id, RunAttempt.number == number)
    )
    if att is None or not secrets.compare_digest(att.token_sha256, hash_token(token)):
        raise NotFound(f"Run {run_id} has no attempt {number} for this token.")
    return att


def handle_event(
    ctx: Any, session: Session, run: Run, att: RunAttempt, event: dict[str, Any]
) -> dict[str, Any]:
    """Apply one worker event; the answer carries the run's pending control request."""
    from .events import apply_event

    att.last_event_at = utcnow()
    if att.state in S.TERMINAL or run.state in S.TERMINAL and att.state != S.RUNNING:
        return {"control": "cancel"}
    apply_event(ctx, session, run, att, event)
    return {"control": run.control}


# -- scheduler -----------------------------------------------------------------
_WAKE = threading.Event()


def wake(_ctx: Any = None) -> None:
    """Ask the scheduler to look at the queue now."""
    _WAKE.set()


class Scheduler:
    """Starts queued runs when their device and base model are ready; notices dead workers."""

    def __init__(self, ctx: Any, executor: Executor | None = None) -> None:
        self.ctx = ctx
        self.executor = executor or LocalExecutor()
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="scheduler", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        _WAKE.set()
        self.thread.join(timeout=5)

    def _loop(self) -> None:
        while not self.stop_event.is_set():
            try:
                self.tick()
            except Exception:
                log.exception("scheduler tick failed")
            _WAKE.wait(1.0)
            _WAKE.clear()

    def tick(self) -> None:
        """One pass: reap dead workers, then start what can start."""
        with self.ctx.db.session() as s:
            self._reap(s)
        self.executor.collect()
        with self.ctx.db.session() as s:
            self._schedule(s)

    def _reap(self, s: Session) -> None:
        for att in s.scalars(select(RunAttempt).where(RunAttempt.state == S.RUNNING)):
            if att.pid is None or self.executor.alive(att.pid):
                continue
            run = s.get(Run, att.run_id)
            code = self.executor.exit_code(att.pid)
            att.state = S.FAILED
            att.exit_code = code
            att.ended_at = utcnow()
            if run is not None and run.state in S.ACTIVE:
                how = (
                    f"was killed by signal {-code}"
                    if code is not None and code < 0
                    else f"exited with code {code}"
                    if code is not None
                    else "ended"
                )
                saved = (
                    f"; resume it from step {run.last_saved_step} with "
                    f"`training runs resume {run.id}`"
                    if run.last_saved_step
                    else ""
                )
                _finish(
                    run,
                    S.FAILED if run.control != "cancel" else S.CANCELLED,
                    f"The worker process {how} at step {run.current_step} without "
                    f"reporting why{saved}.",
                )
                run.failure_detail = _tail(att.log_path)

    def _holders(self, s: Session, device: str) -> list[Run]:
        return list(
            s.scalars(select(Run).where(Run.state.in_(S.ACTIVE), Run.device_kind == device))
        )

    def _schedule(self, s: Session) -> None:
        queued = s.scalars(select(Run).where(Run.state == S.QUEUED).order_by(Run.created_at)).all()
        for run in queued:
            holders = self._holders(s, run.device_kind)
            if holders:
                run.queue_reason = (
                    f"waiting for the {run.device_kind} device held by run {holders[0].id}"
                )
                continue
            try:
                model_dir = self._model_dir(s, run)
            except Conflict as exc:
                if getattr(exc, "code", "") == "base_model_failed":
                    _finish(run, S.FAILED, exc.message)
                else:
                    run.queue_reason = exc.message
                continue
            except Exception as exc:
                _finish(run, S.FAILED, getattr(exc, "message", str(exc)))
                continue
            self._launch(s, run, model_dir)

    def _model_dir(self, s: Session, run: Run) -> Path:
        from ..catalog.cache import ready_model_dir

        path, _entry = ready_model_dir(s, self.ctx.settings, run.base_model)
        return Path(path)

    def _launch(self, s: Session, run: Run, model_dir: Path) -> None:
        from .mapping import build_spec

        number = (
            s.scalar(select(func.max(RunAttempt.number)).where(RunAttempt.run_id == run.id)) or 0
        ) + 1
        token = "ak_w_" + secrets.token_urlsafe(24)
        s.add(
            ApiToken(
                id=uuid.uuid4().hex, token_sha256=hash_token(token), project=f"worker:{run.id}"
            )
        )
        resume_key = None
        if run.resume_step is not None:
            snap = s.scalar(
                select(Snapshot).where(Snapshot.run_id == run.id, Snapshot.step == run.resume_step)
            )
            resume_key = snap.state_key if snap else None
        work = self.ctx.settings.runs_dir / run.id / f"attempt-{number}"
        spec: JobSpec = build_spec(s, self.ctx, run, number, token, model_dir, resume_key, work)
        spec_path = spec.write(work / "spec.json")
        log_path = work / "worker.log"
        att = RunAttempt(
            run_id=run.id,
            number=number,
            state=S.RUNNING,
            executor=self.executor.name,
            device=run.device_kind,
            resume_step=run.resume_step,
            token_sha256=hash_token(token),
            log_path=str(log_path),
        )
        s.add(att)
        run.state = S.PREPARING
        run.queue_reason = None
        run.phase_detail = "starting the worker"
        run.started_at = run.started_at or utcnow()
        s.flush()
        att.pid = self.executor.launch(spec_path, log_path, run.device_kind)


def _tail(path: str | None, n: int = 20000) -> str | None:
    if not path or not Path(path).exists():
        return None
    return Path(path).read_text(errors="replace")[-n:]


def recover(ctx: Any) -> None:
    """At service start: workers of the previous service process keep running when alive;
    the scheduler's first pass fails runs whose worker is gone."""
    with ctx.db.session() as s:
        for run in s.scalars(select(Run).where(Run.state.in_(S.ACTIVE))):
            run.phase_detail = (run.phase_detail or "") + " (service restarted)"


def materialize_adapter(store: Any, key: str) -> Path:
    """Download an adapter saved under ``key`` into a temporary folder (caller removes it)."""
    from .worker import download_prefix

    tmp = Path(tempfile.mkdtemp(prefix="akka-adapter-"))
    try:
        return download_prefix(store, key, tmp)
    except Exception:
        shutil.rmtree(tmp, ignore_errors=True)
        raise

"""The scheduler: admission, the queue and devices; it launches one worker per attempt.

One thread looks at the queue each second, or at once after :func:`wake`. A queued run starts
when every run it waits for (its record's ``resolved.after``: a sweep's comparison waits for
the sweep's branches) has ended, its claim fits its pool and its project's quota in order of
submission (:mod:`akka_optimize.jobs.capacity.usage`; its ``queue_reason`` says its position and
why it waits otherwise), and its base model is in the cache; its kind
(:mod:`akka_optimize.jobs.kinds`) writes the attempt's spec, and an executor
(:mod:`akka_optimize.jobs.executor`) starts the worker. The scheduler knows no kind: a new
kind of job registers itself and is scheduled the same way. Workers that died without a
final event are reaped on each pass (:mod:`akka_optimize.jobs.recovery`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..catalog.cache import ready_model_dir
from ..db.base import utcnow
from ..db.models.auth import hash_token
from ..db.models.jobs import Run, RunAttempt, Snapshot
from ..errors import AkkaError, Conflict
from . import states as S
from .capacity import usage as capacity
from .context import JobContext
from .executor import Executor
from .kinds import Launch, job_kind
from .preparation import WORKER as PREPARE_WORKER
from .preparation import fail_stalled, mark_preparing, prepares_first, rows_path
from .records import attempt_token, finish
from .recovery import reap_dead_workers

log = logging.getLogger("akka_optimize.jobs")

_WAKE = threading.Event()


def wake(_ctx: JobContext = None) -> None:
    """Ask the scheduler to look at the queue now."""
    _WAKE.set()


_TICK_HOOKS: dict[str, Callable[[Any], None]] = {}


def on_tick(name: str, hook: Callable[[Any], None]) -> None:
    """Call ``hook(ctx)`` on every pass of the scheduler, before it starts queued runs
    (pipelines move on to their next stage there: :mod:`akka_optimize.core.pipelines.records`).
    Registering ``name`` again replaces it; a hook that raises is logged and the pass goes
    on."""
    _TICK_HOOKS[name] = hook


class Scheduler:
    """Starts queued runs when their device and base model are ready; notices dead workers."""

    def __init__(self, ctx: JobContext, executor: Executor) -> None:
        self.ctx = ctx
        self.executor = executor
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="scheduler", daemon=True)

    def start(self) -> None:
        """Start the scheduler's thread."""
        self.thread.start()

    def stop(self) -> None:
        """Stop the thread after its current pass (waits up to 5 seconds)."""
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
        """One pass: reap dead workers, run the hooks (:func:`on_tick`), then start what
        can start."""
        with self.ctx.db.session() as s:
            reap_dead_workers(s, self.executor, self.ctx.store)
        self.executor.collect()
        for name, hook in list(_TICK_HOOKS.items()):
            try:
                hook(self.ctx)
            except Exception:
                log.exception("scheduler hook %s failed", name)
        with capacity.LOCK, self.ctx.db.session() as s:
            self._schedule(s)

    def _schedule(self, s: Session) -> None:
        for run in s.scalars(select(Run).where(Run.state == S.QUEUED)).all():
            waiting = capacity.unfinished(s, run)
            if waiting:
                run.queue_reason = (
                    f"waiting for {len(waiting)} of {len((run.resolved or {})['after'])} runs "
                    f"to finish ({', '.join(r[:8] for r in waiting)})"
                )
        dep = self.ctx.deployment()
        for run in s.scalars(select(Run).where(Run.state == S.QUEUED)).all():
            refused = capacity.pool_refusal(dep, run)
            if refused is not None:
                finish(run, S.FAILED, refused.message)
        fail_stalled(s, dep.service.startupTimeoutSeconds, self.executor)
        for run in s.scalars(select(Run).where(Run.state == S.QUEUED)).all():
            if prepares_first(run) and not capacity.unfinished(s, run):
                self._start(s, run, prepare=True)  # tokenizes before its claim (F071)
        book = capacity.ledger(s, dep)

        tried: set[str] = set()

        def start(claim: capacity.Claim) -> str | None:
            if claim.kind == "endpoint":  # its start is the endpoint manager's; kept for it
                return None
            tried.add(claim.id)
            run = s.get(Run, claim.id)
            assert run is not None
            return self._start(s, run)

        for v in capacity.verdicts(s, dep, book, start):
            if v.claim.kind != "endpoint" and v.reason is not None and v.claim.id not in tried:
                run = s.get(Run, v.claim.id)
                if run is not None:
                    run.queue_reason = v.sentence()

    def _start(self, s: Session, run: Run, prepare: bool = False) -> str | None:
        """Launch ``run`` now; None when launched (or failed for good), else why it waits.
        ``prepare``: launch its preparation attempt, which holds no device
        (:mod:`akka_optimize.jobs.preparation`)."""
        try:
            model_dir = self._model_dir(s, run)
        except Conflict as exc:
            if getattr(exc, "code", "") == "base_model_failed":
                finish(run, S.FAILED, exc.message)
                return None
            run.queue_reason = exc.message
            return exc.message
        except Exception as exc:
            finish(run, S.FAILED, getattr(exc, "message", str(exc)))
            return None
        self._launch(s, run, model_dir, prepare)
        return None

    def _model_dir(self, s: Session, run: Run) -> Path:

        path, _entry = ready_model_dir(s, self.ctx.settings, run.base_model)
        return Path(path)

    def _launch(self, s: Session, run: Run, model_dir: Path, prepare: bool = False) -> None:
        try:
            kind = job_kind(run.method)
        except AkkaError as exc:
            finish(run, S.FAILED, exc.message)
            return
        number, token = attempt_token(s, run)
        resume_key = None
        if run.resume_step is not None:
            snap = s.scalar(
                select(Snapshot).where(Snapshot.run_id == run.id, Snapshot.step == run.resume_step)
            )
            resume_key = snap.state_key if snap else None
        work = self.ctx.settings.runs_dir / run.id / f"attempt-{number}"
        launch = Launch(s, self.ctx, run, number, token, model_dir, resume_key, work)
        try:
            spec = kind.build_spec(launch)
        except AkkaError as exc:  # what the job needs is gone (a sweep whose branches all failed)
            finish(run, S.FAILED, exc.message)
            return
        spec.kind, spec.worker = kind.name, kind.worker
        if run.method == "sft" and (run.gpus or 0) > 1:  # its rows, tokenized before the claim
            spec.extra["prepared_rows"] = str(rows_path(self.ctx.settings.runs_dir, run))
        if prepare:
            spec.worker, spec.engine["ranks"] = PREPARE_WORKER, 1
        spec_path = spec.write(work / "spec.json")
        log_path = work / "worker.log"
        att = RunAttempt(
            run_id=run.id,
            number=number,
            state=S.RUNNING,
            executor=self.executor.name,
            device="cpu" if prepare else run.device_kind,
            resume_step=run.resume_step,
            token_sha256=hash_token(token),
            log_path=str(log_path),
        )
        s.add(att)
        if prepare:
            mark_preparing(run)
        else:
            run.state = S.PREPARING
            run.queue_reason = None
            run.phase_detail = "starting the worker"
        run.started_at = run.started_at or utcnow()
        s.flush()
        att.pid = self.executor.launch(spec_path, log_path, att.device)

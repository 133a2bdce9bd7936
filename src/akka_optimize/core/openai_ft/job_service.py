"""Starting, finding, listing and controlling fine-tuning jobs (runs with a job record,
:mod:`.views`). The plan's resolution is passed in (``resolve``: the service's
:func:`akka_optimize.core.plans.resolve_run_plan` for the caller), so this core module
imports no service code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ...db.models.jobs import Run
from ...errors import AkkaError
from ...jobs.context import JobContext
from . import hyper
from .errors import OpenAIError
from .file_store import page
from .jobs import build_plan, rename_field
from .views import job_view, record, run_id_of


def start_job(
    ctx: JobContext, s: Session, project: str, body: Any, resolve: Callable[[dict[str, Any]], Any]
) -> dict[str, Any]:
    """Create the job's run and answer its ``FineTuningJob`` (``"auto"`` resolved).

    Raises:
        OpenAIError: a field that cannot be honoured (:func:`.jobs.build_plan`), or the
            plan's refusal renamed to the OpenAI field that set it.
    """
    from ...jobs.supervised import start_run  # lazy: torch

    plan, job = build_plan(ctx, s, project, body)
    kind, stated = job["type"], job["stated"]
    try:
        # resolved once for the platform's defaults, then with the stated values
        default_lr = hyper.apply(plan, kind, stated, job["rows"], resolve(plan).plan)
        resolved = resolve(plan)
        view = start_run(ctx, s, resolved, None)
    except AkkaError as exc:
        raise rename_field(exc, job["hpParam"]) from None
    run = s.get(Run, view["id"])
    assert run is not None
    job["hyperparameters"] = hyper.resolved(resolved.plan, kind, job["rows"], default_lr)
    keep = (
        "model",
        "training_file",
        "validation_file",
        "suffix",
        "seed",
        "metadata",
        "type",
        "hyperparameters",
        "grader",
    )
    run.results = {**(run.results or {}), "openaiJob": {k: job.get(k) for k in keep}}
    s.flush()
    return job_view(run)


def find_job(s: Session, jid: Any, visible: str | None) -> Run:
    """The run of job ``jid`` in project ``visible`` (None: any).

    Raises:
        OpenAIError: 404 ``not_found`` for another project's job, a run that is no job,
            or none.
    """
    run = s.get(Run, run_id_of(jid))
    if run is None or record(run) is None or visible not in (None, run.project):
        raise OpenAIError(f"No fine-tuning job {jid!r}.", "fine_tuning_job_id", "not_found", 404)
    return run


def list_jobs(
    s: Session, visible: str | None, after: str | None, limit: int, metadata: dict[str, str]
) -> dict[str, Any]:
    """A page of jobs, newest first, whose metadata holds every ``metadata`` pair
    (OpenAI's ``metadata[KEY]=VALUE`` filter)."""
    q = (
        select(Run)
        .where(Run.submission_id.like("openai-ftjob-%"))
        .order_by(Run.created_at.desc(), Run.id)
    )
    if visible is not None:
        q = q.where(Run.project == visible)
    jobs = []
    for run in s.scalars(q):
        rec = record(run)
        if rec is not None and all(
            (rec.get("metadata") or {}).get(k) == v for k, v in metadata.items()
        ):
            jobs.append(job_view(run))
    return page(jobs, after, limit)


def control(ctx: JobContext, s: Session, run: Run, action: str) -> dict[str, Any]:
    """``cancel``, ``pause`` or ``resume`` the job's run (:mod:`akka_optimize.jobs.control`);
    a run that cannot (a finished one, a paused one resumed twice) is a 400 naming the job."""
    from ...jobs import control as ctl  # lazy: httpx

    try:
        if action == "resume":
            ctl.resume(ctx, s, run, None)
        else:
            ctl.request_control(ctx, s, run, action)
    except AkkaError as exc:
        raise OpenAIError(exc.message, "fine_tuning_job_id", "invalid_state", 400) from None
    s.flush()
    return job_view(run)

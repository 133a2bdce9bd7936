"""Recipe runs: ``minifield-worker`` recipes submitted to the service and claimed by
supervised workers (seeds/003 "the supervisor advertises its accepted computations when
claiming work"; issue 26 item 2).

A recipe run is a run record of kind ``recipe`` (:data:`RECIPE`), visible in
``training runs list|get|metrics`` like any run. Its life:

- **submit** (:func:`submit_recipe`): the recipe is validated exactly as a direct
  ``minifield-worker run`` validates it (strategy dispatch, fields, rows, the packing plan
  and its capacity) and its computation identity is computed, all before anything is
  stored; the run waits ``QUEUED``. Its data is the recipe's own ``model.path`` and
  ``data.path``, which must be absolute paths that the service and the workers both read
  (a shared filesystem); the CLI makes a recipe file's relative paths absolute.
- **claim** (:func:`claim_recipe`): a worker advertises the computations it has installed
  (``schema_version``, ``implementation``, ``computation``) and gets the oldest queued
  recipe run it can do, atomically (a conditional update from ``QUEUED``: two workers never
  claim the same run), now ``RUNNING`` with a new attempt and that attempt's worker token.
- **events**: the worker posts ``phase``, ``metrics``, ``failed``, ``cancelled`` and
  ``paused`` through the route every run's worker uses, plus this kind's ``checkpoint``,
  ``completed`` and ``heartbeat`` (:func:`checkpointed`, :func:`completed`).
- **silence**: the service cannot see the worker's process, so the worker sends a
  ``heartbeat`` every quarter of ``service.recipeHeartbeatSeconds`` (the claim answer's
  ``heartbeatSeconds``); a claimed attempt with no event for that long fails its run with a
  sentence (:func:`reap_silent`, on each scheduler pass), never left ``RUNNING``.

The kind is external (:attr:`akka_optimize.jobs.kinds.JobKind.external`): the scheduler
never launches it, and it claims no pool devices or project quota; the worker's machine is
its own, so nothing is counted twice.
"""

from __future__ import annotations

import datetime as dt
import json
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from ...db.base import intent, utcnow
from ...db.models.auth import hash_token
from ...db.models.jobs import Run, RunAttempt
from ...errors import Conflict, InvalidRequest
from ...jobs import states as S
from ...jobs.kinds import JobKind, Launch
from ...jobs.records import attempt_token, end_attempt
from ...jobs.spec import JobSpec
from ...jobs.views import run_view
from ...minifield.registry import select as select_strategy
from ..access import rules as access
from ..access.scope import scope
from ..auth import Principal
from ..context import ServiceContext
from ..plans import deployment_for
from .paths import confine

METHOD = "recipe"
MAX_WAIT_S = 60
ADVERT_KEYS = ("schema_version", "implementation", "computation")
_SUBMITTED = threading.Condition()


def _never_launched(launch: Launch) -> JobSpec:
    """The scheduler never launches an external kind; reaching this is refused, named."""
    raise Conflict(
        f"Run {launch.run.id} is a recipe run: a minifield-worker claims it "
        "(`minifield-worker supervise`); the service does not launch it.",
        field="run",
    )


def checkpointed(
    ctx: ServiceContext, s: Session, run: Run, att: RunAttempt, ev: dict[str, Any]
) -> None:
    """A ``checkpoint`` event: the worker saved its state after update ``step`` at ``path``
    (on the worker's machine)."""
    out = dict((run.results or {}).get("recipe") or {})
    out["checkpoint"] = {"step": int(ev.get("step") or 0), "path": str(ev.get("path"))[:1000]}
    run.results = {**(run.results or {}), "recipe": out}
    run.phase_detail = f"checkpoint after update {ev.get('step')}"


def completed(
    ctx: ServiceContext, s: Session, run: Run, att: RunAttempt, ev: dict[str, Any]
) -> None:
    """The worker's final event: the run ``SUCCEEDED`` with the final weights' folder and,
    for packed QAT, the export's file (both on the worker's machine)."""
    result = ev.get("result") or {}
    out = dict((run.results or {}).get("recipe") or {})
    for key in ("final", "export", "worker"):
        if result.get(key) is not None:
            out[key] = str(result[key])[:1000]
    extra = {k: result[k] for k in ("finalLoss", "meanLoss") if result.get(k) is not None}
    run.results = {**(run.results or {}), **extra, "recipe": out}
    end_attempt(run, att, S.SUCCEEDED)


def heartbeat(
    ctx: ServiceContext, s: Session, run: Run, att: RunAttempt, ev: dict[str, Any]
) -> None:
    """A ``heartbeat`` event: the worker is alive (the intake already recorded the time in
    ``last_event_at``; nothing else changes)."""


def silent_for(att: RunAttempt, now: dt.datetime) -> float:
    """Seconds since ``att``'s last event (since its claim when it sent none)."""
    last = att.last_event_at or att.started_at
    if last.tzinfo is None:  # SQLite returns naive UTC times
        last = last.replace(tzinfo=dt.UTC)
    return (now - last).total_seconds()


def silence_sentence(run: Run, deadline_s: float) -> str:
    """Why a run whose supervised worker went silent failed, and how to go on."""
    recipe = (run.results or {}).get("recipe") or {}
    saved = recipe.get("checkpoint") or {}
    where = (
        f"; a worker with the same output folder continues from its checkpoint after update "
        f"{saved['step']}"
        if saved.get("step") is not None
        else ""
    )
    return (
        f"The minifield-worker that claimed it ({recipe.get('worker') or 'a supervised worker'})"
        f" sent no event for {deadline_s:g} s (service.recipeHeartbeatSeconds): its process or "
        f"machine is gone. Resume it with `training runs resume {run.id}`{where}."
    )


def reap_silent(ctx: ServiceContext, now: dt.datetime | None = None) -> list[str]:
    """Fail each recipe run whose claimed attempt sent no event for
    ``service.recipeHeartbeatSeconds`` (:func:`silence_sentence`); a scheduler pass hook
    (:func:`akka_optimize.jobs.scheduler.on_tick`). Returns the failed runs' IDs."""
    deadline = float(deployment_for(ctx).service.recipeHeartbeatSeconds)
    now = now or dt.datetime.now(dt.UTC)
    failed = []
    with ctx.db.session() as s:
        running = select(RunAttempt, Run).join(Run, Run.id == RunAttempt.run_id)
        running = running.where(Run.method == METHOD, RunAttempt.state == S.RUNNING)
        for att, run in s.execute(running).all():
            if silent_for(att, now) > deadline:
                end_attempt(run, att, S.FAILED, silence_sentence(run, deadline))
                failed.append(run.id)
    return failed


RECIPE = JobKind(
    name=METHOD,
    worker="akka_optimize.minifield.supervise:supervise",
    build_spec=_never_launched,
    events={"checkpoint": checkpointed, "completed": completed, "heartbeat": heartbeat},
    external=True,
)
"""The recipe kind, listed in :data:`akka_optimize.core.job_kinds.KINDS`."""


def check_recipe(doc: Any, roots: list[str]) -> dict[str, Any]:
    """Validate ``doc`` as ``minifield-worker run`` does and describe its computation.
    Its ``model.path`` and ``data.path`` must lie under ``roots`` (``service.recipeRoots``)
    and are replaced by their resolved paths before anything reads them.

    Returns:
        ``{"computation": {strategy, computation, schemaVersion, implementation,
        computationIdentity, updates}, "recipe": the recipe with defaults, "settings": what
        the identity binds, "submitted": ``doc`` with its paths resolved}``.

    Raises:
        InvalidRequest: (the field's path) the sentence of the direct worker's refusal, or
            a ``model.path`` / ``data.path`` refused by
            :func:`akka_optimize.core.recipes.paths.confined_path`.
    """
    from ...minifield.train import Worker  # lazy: torch

    if not isinstance(doc, dict):
        raise InvalidRequest("recipe must be a JSON object.", field="recipe")
    select_strategy(doc)  # the field errors first, as the direct worker reports them
    doc = confine(doc, roots)
    with tempfile.TemporaryDirectory(prefix="akka-recipe-") as tmp:
        path = Path(tmp) / "recipe.json"
        path.write_text(json.dumps(doc))
        worker = Worker(path, Path(tmp) / "out", device="cpu")
    head = worker.header()
    return {
        "computation": {
            "strategy": head["strategy"],
            "computation": head["computation"],
            "schemaVersion": head["schema_version"],
            "implementation": head["implementation"],
            "computationIdentity": head["computation_identity"],
            "updates": len(worker.plan.updates),
        },
        "recipe": worker.resolved(),
        "settings": worker.settings,
        "submitted": doc,
    }


def _waiting_sentence(c: dict[str, Any]) -> str:
    return (
        f"waiting for a minifield-worker that accepts computation {c['computation']} "
        f"({c['strategy']}, {c['implementation']}) to claim it"
    )


def submit_recipe(ctx: ServiceContext, principal: Principal | None, body: Any) -> dict[str, Any]:
    """Record a recipe run (``{"project", "recipe"}``) in ``QUEUED``; returns its view.
    The recipe is checked before the write transaction opens (its rows are tokenized).

    Raises:
        InvalidRequest: a missing or unknown field, or the recipe refused (:func:`check_recipe`).
        Forbidden: a project token submitting to another project. NotFound: no such project.
    """
    if not isinstance(body, dict):
        raise InvalidRequest("The body must be a JSON object {project, recipe}.", field="body")
    unknown = sorted(set(body) - {"project", "recipe"})
    if unknown:
        raise InvalidRequest(f"{unknown[0]}: not a field here (project, recipe).", field=unknown[0])
    for key in ("project", "recipe"):
        if body.get(key) is None:
            raise InvalidRequest(f"A recipe submission needs {key}.", field=key)
    access.check_project_write(principal, body["project"], "recipes.submit")
    with intent(False), ctx.db.session() as s:
        access.find_project(s, str(body["project"]), principal)  # before the costly check
    checked = check_recipe(body["recipe"], deployment_for(ctx).service.recipeRoots)
    submitted = checked.pop("submitted")
    c = checked["computation"]
    with ctx.db.session() as session:
        project = access.find_project(session, str(body["project"]), principal)
        run = Run(
            id=uuid.uuid4().hex[:16],
            project=project.name,
            method=METHOD,
            state=S.QUEUED,
            plan=submitted,
            resolved={**checked, "claims": None},
            config_hash=c["computationIdentity"],
            base_model=str(checked["recipe"]["model"]["path"])[:256],
            dataset=str(checked["recipe"]["data"]["path"])[:256],
            model_name=c["strategy"],
            device_kind="cpu",
            gpus=0,
            total_steps=c["updates"],
            results={},
            queue_reason=_waiting_sentence(c),
        )
        session.add(run)
        session.flush()
        view = run_view(session, run)
    with _SUBMITTED:
        _SUBMITTED.notify_all()
    return view


def check_advert(body: Any) -> tuple[list[tuple[str, str, str]], float, str]:
    """The claim body ``{"accepts": [{schema_version, implementation, computation}...],
    "wait": seconds (0–60, default 0), "worker": name}`` checked.

    Raises:
        InvalidRequest: naming the field that is missing, unknown or out of range.
    """
    if not isinstance(body, dict):
        raise InvalidRequest(
            "The body must be a JSON object {accepts, wait, worker}.", field="body"
        )
    unknown = sorted(set(body) - {"accepts", "wait", "worker"})
    if unknown:
        raise InvalidRequest(
            f"{unknown[0]}: not a claim field (accepts, wait, worker).", field=unknown[0]
        )
    accepts = body.get("accepts")
    if not isinstance(accepts, list) or not accepts:
        raise InvalidRequest("accepts must list at least one computation.", field="accepts")
    out = []
    for i, a in enumerate(accepts):
        if not isinstance(a, dict) or not all(isinstance(a.get(k), str) for k in ADVERT_KEYS):
            raise InvalidRequest(
                f"accepts[{i}] must be an object of strings {', '.join(ADVERT_KEYS)}.",
                field=f"accepts[{i}]",
            )
        out.append((a["schema_version"], a["implementation"], a["computation"]))
    wait = body.get("wait", 0)
    if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait <= MAX_WAIT_S:
        raise InvalidRequest(f"wait must be seconds from 0 to {MAX_WAIT_S}.", field="wait")
    worker = body.get("worker") or "minifield-worker"
    return out, float(wait), str(worker)[:120]


def _candidates(s: Session, mine: str | None, offers: set[tuple[str, str, str]]) -> list[str]:
    q = select(Run).where(Run.method == METHOD, Run.state == S.QUEUED)
    if mine is not None:
        q = q.where(Run.project == mine)
    out = []
    for run in s.scalars(q.order_by(Run.created_at, Run.id)):
        c = (run.resolved or {}).get("computation") or {}
        if (c.get("schemaVersion"), c.get("implementation"), c.get("computation")) in offers:
            out.append(run.id)
    return out


def _take(s: Session, run_id: str, worker: str, heartbeat_s: int) -> dict[str, Any] | None:
    """Claim ``run_id`` if it is still queued (one conditional update), else None."""
    taken = s.execute(
        update(Run)
        .where(Run.id == run_id, Run.state == S.QUEUED)
        .values(state=S.RUNNING, queue_reason=None)
        .execution_options(synchronize_session=False)
    )
    if taken.rowcount != 1:
        return None
    run = s.get(Run, run_id)
    assert run is not None
    s.refresh(run)
    number, token = attempt_token(s, run)
    s.add(
        RunAttempt(
            run_id=run.id,
            number=number,
            state=S.RUNNING,
            executor="supervised",
            device=run.device_kind,
            token_sha256=hash_token(token),
        )
    )
    run.started_at = run.started_at or utcnow()
    run.phase_detail = f"claimed by {worker}"
    run.results = {**(run.results or {}), "recipe": {"worker": worker}}
    s.flush()
    return {
        "run": run.id,
        "project": run.project,
        "attempt": number,
        "token": token,
        "recipe": run.plan,
        "computation": run.resolved["computation"],
        "settings": run.resolved["settings"],
        "eventsPath": f"/v1/training/runs/{run.id}/attempts/{number}/events",
        "heartbeatSeconds": heartbeat_s,
    }


def claim_recipe(
    ctx: ServiceContext, principal: Principal | None, body: Any
) -> dict[str, Any] | None:
    """The oldest queued recipe run the advertised computations can do, claimed; or None
    when none came within ``wait`` seconds. A project token claims only its project's.

    An attempt's worker token never gets here (:func:`akka_optimize.service.deps.
    get_principal` keeps it to its own run's attempt routes).

    Raises:
        InvalidRequest: a malformed advert (:func:`check_advert`).
    """
    offers, wait, worker = check_advert(body)
    heartbeat_s = deployment_for(ctx).service.recipeHeartbeatSeconds
    mine = scope(principal)
    deadline = time.monotonic() + wait
    while True:
        with intent(False), ctx.db.session() as s:
            ids = _candidates(s, mine, set(offers))
        for run_id in ids:
            with ctx.db.session() as s:
                job = _take(s, run_id, worker, heartbeat_s)
            if job is not None:
                return job
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        with _SUBMITTED:
            _SUBMITTED.wait(min(left, 1.0))

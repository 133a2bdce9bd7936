"""Evaluations as jobs: the ``eval`` kind, how one is accepted, and what it reports.

An evaluation is a run record whose ``method`` is ``eval`` (:mod:`akka_optimize.jobs.kinds`):
the same scheduler, executor, states (``QUEUED`` → ``PREPARING`` → ``RUNNING`` →
``SUCCEEDED``/``FAILED``/``CANCELLED``), cancel and recovery as a training run. Its worker
(:func:`akka_optimize.evals.worker.evaluate`) answers the dataset's prompts with the serving
engine and grades the answers in the sandbox (:mod:`akka_optimize.evals.sandbox.pool`).

:func:`start_evaluation` pins the model, dataset and bundle to exact versions at acceptance
and refuses, naming the field, whatever would fail later: a grader whose module or function
the bundle does not define, a dataset row without ground truth, a base model that is not
ready, options a bundle grader would ignore.

Its parts: :mod:`akka_optimize.evals.request` (the methods, defaults and
:class:`EvalRequest`), :mod:`akka_optimize.evals.scoring` (:func:`check_scoring`) and
:mod:`akka_optimize.evals.views` (the API records); this module accepts, launches and
finishes the jobs, and registers the two kinds.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

from sqlalchemy.orm import Session

from ..catalog.cache import ready_model_dir
from ..db.models.jobs import Run, RunAttempt
from ..deployment import cuda_available, load_deployment
from ..errors import Conflict
from ..jobs import states as S
from ..jobs.capacity import usage as capacity
from ..jobs.context import JobContext
from ..jobs.kinds import JobKind, Launch
from ..jobs.records import end_attempt
from ..jobs.scheduler import wake
from ..jobs.spec import JobSpec
from ..registry import resolve
from .request import COMPARE as COMPARE
from .request import DEFAULT_SAMPLING as DEFAULT_SAMPLING
from .request import MAX_ERROR_SHARE as MAX_ERROR_SHARE
from .request import METHOD as METHOD
from .request import EvalRequest as EvalRequest
from .scoring import base_key_of as base_key_of
from .scoring import check_scoring as check_scoring
from .views import comparison_view as comparison_view
from .views import evaluation_view as evaluation_view
from .views import find_evaluation as find_evaluation
from .views import iso_time as iso_time
from .views import list_evaluations as list_evaluations
from .views import most_different
from .views import read_examples as read_examples


def _side(model: Any) -> dict[str, Any]:
    return {
        "modelId": model.pinned,
        "model": f"{model.repo}:v{model.version}",
        "modelSource": "adapter" if model.source == "adapter" else "base",
    }


def eval_device_kind(settings: Any) -> str:
    """Where answers are generated: the deployment's default device profile's kind, else
    ``cuda`` when this machine has a CUDA device, else ``cpu``."""

    dep = load_deployment(settings.resolved_deployment_file())
    prof = dep.profile(dep.defaultDeviceProfile) if dep.defaultDeviceProfile else None
    return prof.kind if prof is not None else ("cuda" if cuda_available() else "cpu")


def serving_precision(ctx: JobContext) -> str:
    """The deployment's ``serving.precision``: the dtype an evaluation's answers are
    generated in (pinned in its resolved settings when it is created)."""

    return ctx.deployment().serving.precision


def kind_resolved(ctx: JobContext, s: Session, req: EvalRequest, resolve: Any) -> dict[str, Any]:
    """The evaluation's pinned settings (what the worker runs and ``get`` shows)."""
    sc = check_scoring(
        ctx, s, req.grader, req.grader_instructions, req.dataset, resolve, limit=req.limit
    )
    model = req.model
    sides = [_side(model)] + ([_side(req.baseline)] if req.baseline is not None else [])
    return {
        "kind": "evaluation" if req.baseline is None else "comparison",
        "project": req.project,
        "modelId": model.pinned,
        "model": f"{model.repo}:v{model.version}",
        "modelSource": sides[0]["modelSource"],
        "sides": sides,
        "baseModel": req.base_key,
        "dataset": sc.dataset.pinned,
        "datasetRows": len(sc.rows),
        "grader": sc.grader(),
        "graderInstructions": sc.instructions,
        "instructionsSource": sc.source,
        "sampling": req.sampling,
        "precision": serving_precision(ctx),
        "limit": req.limit,
        "maxErrorShare": MAX_ERROR_SHARE,
        **({"trigger": req.trigger} if req.trigger else {}),
    }


def evaluation_claims(
    ctx: JobContext, project: str, device_kind: str, judged: bool
) -> list[dict[str, Any]]:
    """The evaluation's claims (one device, and its judge endpoint when judged), as its
    record shows them; refused when no quota or pool could ever admit them (issue 22;
    :mod:`akka_optimize.jobs.capacity.usage`).

    Raises:
        InvalidRequest: ``quota_exceeded``, naming the quota or the pool.
    """

    dep = ctx.deployment()
    devices = capacity.run_devices(dep, None, device_kind, 0, judged)
    refused = capacity.refusal(
        dep,
        project,
        devices,
        capacity.claim_words(devices, judged),
        "grader" if judged else "model",
    )
    if refused is not None:
        raise refused
    return capacity.claim_list(dep, None, device_kind, 0, judged, "evaluation devices")


def start_evaluation(ctx: JobContext, s: Session, req: EvalRequest, resolve: Any) -> dict[str, Any]:
    """Record an evaluation (a comparison when ``req.baseline`` is set); it waits
    ``QUEUED`` until the scheduler starts it.

    Args:
        resolve: ``resolve(kind, ref, field=...)`` over the registry versions the caller
            sees in the evaluation's project (the service's access rules).

    Raises:
        InvalidRequest / NotFound / Forbidden / Conflict: the request is refused (the field
            named); nothing is created.
    """

    ready_model_dir(s, ctx.settings, req.base_key)  # refuses a base model that is not READY
    resolved = kind_resolved(ctx, s, req, resolve)
    claims = evaluation_claims(
        ctx, req.project, req.device_kind, bool(resolved["grader"].get("judge"))
    )
    digest = hashlib.sha256(json.dumps(resolved, sort_keys=True).encode()).hexdigest()
    resolved["claims"] = claims  # not hashed: the same evaluation on another deployment
    run = Run(
        id=uuid.uuid4().hex[:16],
        project=req.project,
        method=METHOD if req.baseline is None else COMPARE,
        state=S.QUEUED,
        plan=req.raw,
        resolved=resolved,
        config_hash=digest,
        base_model=req.base_key,
        dataset=resolved["dataset"],
        validation_dataset=None,
        model_name=resolved["model"],
        device_kind=req.device_kind,
        gpus=0,
        total_steps=resolved["datasetRows"] * len(resolved["sides"]),
        results={},
        queue_reason="waiting for the scheduler",
    )
    s.add(run)
    s.flush()
    wake(ctx)
    return evaluation_view(s, run) if req.baseline is None else comparison_view(s, run)


def _grader_spec(s: Session, r: dict[str, Any]) -> dict[str, Any]:
    """What the worker needs of the pinned grader: a bundle's record, or a judge's
    instructions (the judge itself is reached through its endpoint)."""

    g = dict(r["grader"])
    if g.get("judge"):
        return {**g, "kind": "model", "instructions": r.get("graderInstructions")}
    return {**g, "kind": "bundle", "bundle": resolve(s, "bundle", g["bundle"]).to_dict()}


def sweep_sides(s: Session, r: dict[str, Any]) -> dict[str, Any]:
    """A sweep comparison's sides once its branches have ended: the source snapshot first,
    then each branch that succeeded, as its registered model; a branch that did not is
    listed in ``leftOut`` with its state.

    Raises:
        Conflict: no branch succeeded, so there is nothing to score against the source.
    """

    sides, left_out = [r["sides"][0]], []
    for b in r["branches"]:
        run = s.get(Run, b["run"])
        model = run.registered_model if run is not None else None
        if run is None or run.state != S.SUCCEEDED or not model:
            left_out.append({**b, "state": run.state if run is not None else "DELETED"})
            continue
        name = model.split("@", 1)[0]
        sides.append({**b, "modelId": model, "model": name, "modelSource": "adapter"})
    if len(sides) == 1:
        raise Conflict(
            f"None of the sweep's {len(r['branches'])} branches succeeded, so there is no "
            "model to score against the source snapshot; `training runs sweep` again.",
            field="compare",
        )
    return {"sides": sides, "leftOut": left_out}


def build_spec(launch: Launch) -> JobSpec:
    """The job spec of an evaluation attempt (the ``eval`` kind's ``build_spec``)."""

    s, run = launch.session, launch.run
    r = run.resolved
    g = launch.ctx.deployment().graders
    limits = {
        "cpu_seconds": g.cpuSeconds,
        "wall_seconds": g.wallSeconds,
        "memory_bytes": g.memoryMiB * 1024**2,
        "workers": g.workers,
    }
    if r.get("kind") == "sweep":
        r = run.resolved = {**r, **sweep_sides(s, r)}
        run.total_steps = r["datasetRows"] * len(r["sides"])
    sides = r.get("sides") or [r]
    ev = {
        "sides": [
            {
                "model": side["modelId"],
                "adapter": resolve(s, "model", side["modelId"]).to_dict()
                if side["modelSource"] == "adapter"
                else None,
                "adapterKey": side.get("adapterKey"),
            }
            for side in sides
        ],
        "fan": r.get("kind") == "sweep",
        "grader": _grader_spec(s, r),
        "sampling": r["sampling"],
        "precision": r.get("precision", "auto"),
        "limit": r["limit"],
        "limits": limits,
    }
    return launch.spec(
        dataset=resolve(s, "dataset", r["dataset"]).to_dict(),
        device="cuda" if run.device_kind == "cuda" else "cpu",
        extra={"evaluation": ev, "hidden": [str(launch.ctx.settings.home)]},
    )


def record_progress(
    ctx: JobContext, s: Session, run: Run, att: RunAttempt, event: dict[str, Any]
) -> None:
    run.current_step = int(event.get("completed") or 0)
    run.total_steps = int(event.get("total") or run.total_steps or 0)
    stage = str(event.get("stage") or "")
    run.results = {**(run.results or {}), "stage": stage}


def _completed(
    ctx: JobContext, s: Session, run: Run, att: RunAttempt, event: dict[str, Any]
) -> None:
    res = dict(event.get("result") or {})
    if "fan" in res:  # a sweep's comparison: the source against every branch
        count = res["baseline"]["count"] * (1 + len(res["fan"]))
        errors = res["baseline"]["errors"] + sum(f["errors"] for f in res["fan"])
        what, cmd = "answers", "comparisons"
    elif run.method == COMPARE:
        res["mostDifferent"] = most_different(read_examples(ctx.store, run, res))
        count, errors = res.get("pairs", 0) + res.get("errors", 0), res.get("errors", 0)
        what, cmd = "example pairs", "comparisons"
    else:
        count, errors = res.get("count", 0), res.get("errors", 0)
        what, cmd = "examples", "evaluations"
    run.results = {**(run.results or {}), **res, "stage": "graded"}
    run.current_step = run.total_steps or run.current_step or 0
    if count and errors / count > MAX_ERROR_SHARE:
        end_attempt(
            run,
            att,
            S.FAILED,
            f"{errors} of {count} {what} could not be scored (more than "
            f"{MAX_ERROR_SHARE:.0%}); `training {cmd} get {run.id[:8]} --examples` shows "
            "each one's reason.",
        )
    else:
        end_attempt(run, att, S.SUCCEEDED)


EVALUATION = JobKind(
    name=METHOD,
    worker="akka_optimize.evals.worker:evaluate",
    build_spec=build_spec,
    events={"progress": record_progress, "completed": _completed},
)
"""The evaluation kind, listed in :data:`akka_optimize.core.job_kinds.KINDS`."""

COMPARISON = JobKind(
    name=COMPARE,
    worker="akka_optimize.evals.worker:evaluate",
    build_spec=build_spec,
    events={"progress": record_progress, "completed": _completed},
)
"""The comparison kind: both models answer on one engine, one grader scores both."""

"""A project's evaluation settings, the evaluation they queue for each registered model
version, and the project's scores table (seeds/001 "A training project holds a task's runs,
models and evaluation settings", "The comparison table in training projects scores";
FEATURES F055, F056).

Settings are set by ``training projects create … --dataset D --grader G`` or ``training
projects set-evaluation``. Both the dataset and the grader's bundle are **pinned** to exact
versions when the settings are accepted, so every evaluation they queue, and every row of
the scores table, measures the same thing; set them again to move to a newer version.

When a model version is registered in a project whose settings have ``autoEvaluate`` (the
default), :func:`queue_for_registered` queues its evaluation with those settings (a run's
final model, its epoch and save registrations, and an uploaded adapter alike). An
evaluation that cannot be queued never fails the registration: the sentence is kept in the
settings' ``lastQueued`` and shown by ``training projects get``. (the listener is installed with
the job kinds: :func:`akka_optimize.core.job_kinds.install`).

The scores table (:func:`project_scores`) takes, per model version, the newest succeeded
evaluation in the project that used the settings' dataset, grader and sampling over every
row, and groups them by base-model version, best mean first.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..db.models.jobs import Run
from ..db.models.projects import Project
from ..errors import Conflict
from ..jobs import states as S
from ..jobs.context import JobContext
from ..registry import resolve as registry_resolve
from .kind import METHOD, EvalRequest, base_key_of, check_scoring, eval_device_kind
from .kind import start_evaluation as start

log = logging.getLogger(__name__)


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


def make_settings(
    ctx: JobContext,
    s: Session,
    *,
    dataset: str,
    grader: str,
    grader_instructions: str | None,
    sampling: dict[str, Any],
    auto_evaluate: bool,
    resolve: Any,
) -> dict[str, Any]:
    """Checked, pinned evaluation settings of a project (what ``Project.evaluation`` keeps).

    Args:
        resolve: ``resolve(kind, ref, field=...)`` over the registry versions the caller
            sees in the project.

    Raises:
        InvalidRequest / NotFound: as :func:`akka_optimize.evals.kind.check_scoring`, which
            an evaluation's request passes too (one rule for both).
    """
    sc = check_scoring(ctx, s, grader, grader_instructions, dataset, resolve)
    return {
        "dataset": sc.dataset.pinned,
        "datasetRows": len(sc.rows),
        "grader": sc.grader(),
        "graderInstructions": sc.given,
        "instructionsSource": sc.source,
        "sampling": dict(sampling),
        "autoEvaluate": bool(auto_evaluate),
        "setAt": _now(),
        "lastQueued": None,
    }


def settings_view(cfg: dict[str, Any] | None) -> dict[str, Any] | None:
    """The API shape of a project's evaluation settings (None when unset)."""
    if not cfg:
        return None
    g = cfg.get("grader") or {}
    return {
        "dataset": cfg.get("dataset"),
        "grader": g.get("spec"),
        "bundle": g.get("bundle"),
        "graderInstructions": cfg.get("graderInstructions"),
        "instructionsSource": cfg.get("instructionsSource"),
        "sampling": cfg.get("sampling"),
        "autoEvaluate": cfg.get("autoEvaluate", True),
        "setAt": cfg.get("setAt"),
        "lastQueued": cfg.get("lastQueued"),
    }


def grader_text(cfg: dict[str, Any]) -> str:
    """The pinned grader of settings, as a grader specification an evaluation accepts."""
    g = cfg["grader"]
    if g.get("judge"):
        return f"model:{g['judge']}"
    return f"bundle:{g['bundle']}#{g['module']}:{g['function']}"


def queue_for_registered(ctx: JobContext, s: Session, project: str, model: Any) -> str | None:
    """Queue the evaluation of a newly registered model version ``model`` (a
    :class:`akka_optimize.registry.ResolvedVersion`) when ``project`` has evaluation
    settings with ``autoEvaluate``; returns the evaluation's ID, or None when none was
    queued. Runs inside the registration's transaction, in a savepoint: an evaluation that
    cannot be queued (its base model not ready, a refused reference) is logged and kept as
    the sentence in ``lastQueued.error``, and the registration stands.
    """

    p = s.scalar(select(Project).where(Project.name == project))
    cfg = p.evaluation if p is not None else None
    if not cfg or not cfg.get("autoEvaluate", True):
        return None

    def resolve(kind: str, ref: str, *, field: str) -> Any:
        return registry_resolve(s, kind, ref, project, field=field)

    req = EvalRequest(
        project=project,
        model=model,
        base_key=base_key_of(model),
        dataset=cfg["dataset"],
        grader=grader_text(cfg),
        grader_instructions=cfg.get("graderInstructions"),
        sampling=dict(cfg.get("sampling") or {}),
        limit=None,
        raw={
            "modelId": model.pinned,
            "dataset": cfg["dataset"],
            "grader": grader_text(cfg),
            "sampling": cfg.get("sampling") or {},
            "trigger": "registered",
        },
        device_kind=eval_device_kind(ctx.settings),
        trigger="registered",
    )
    last: dict[str, Any] = {"model": f"{model.repo}:v{model.version}", "at": _now()}
    queued = None
    try:
        with s.begin_nested():
            queued = start(ctx, s, req, resolve)["id"]
        last["evaluationId"] = queued
    except Exception as exc:  # the registration stands; the reason is kept
        log.warning("no evaluation queued for %s: %s", model.pinned, exc)
        last["error"] = str(exc)
    p.evaluation = {**cfg, "lastQueued": last}  # a new dict, so the JSON column is written
    return queued


def _matches(r: dict[str, Any], cfg: dict[str, Any]) -> bool:
    g, want = r.get("grader") or {}, cfg["grader"]
    return (
        r.get("dataset") == cfg["dataset"]
        and r.get("limit") is None
        and all(g.get(k) == want.get(k) for k in ("bundle", "module", "function", "judge"))
        and (r.get("sampling") or {}) == (cfg.get("sampling") or {})
        and (not want.get("judge") or r.get("instructionsSource") == cfg.get("instructionsSource"))
    )


def _repository(s: Session, base_key: str) -> str | None:

    try:
        return (registry_resolve(s, "model", base_key).metadata or {}).get("repository")
    except Exception:  # a base model since removed from the registry keeps its row
        return None


def project_scores(s: Session, project: Project) -> dict[str, Any]:
    """The scores table of ``project`` (``GET /v1/training/projects/P/scores``).

    Returns:
        ``{"project", "dataset", "grader", "sampling", "rows": [{"baseModel", "repository",
        "models": [{"model", "modelId", "source", "mean", "stderr", "count", "errors",
        "evaluationId", "finishedAt"}, …]}, …]}``: one row per base-model version (by
        name), its models best mean first (ties by name).

    Raises:
        Conflict: (field ``project``) the project has no evaluation settings, so there is
            nothing its scores are measured on; the sentence names the command that sets them.
    """
    cfg = project.evaluation
    if not cfg:
        raise Conflict(
            f"Project {project.name!r} has no evaluation settings, so it has no scores table; "
            f"set them with `training projects set-evaluation {project.name} --dataset "
            "DATASET --grader GRADER`.",
            field="project",
        )
    runs = s.scalars(
        select(Run)
        .where(Run.project == project.name, Run.method == METHOD, Run.state == S.SUCCEEDED)
        .order_by(Run.finished_at, Run.created_at)
    ).all()
    newest: dict[str, Run] = {}
    for run in runs:
        r = run.resolved or {}
        if _matches(r, cfg) and "mean" in (run.results or {}):
            newest[r["modelId"]] = run  # later evaluations replace earlier ones
    groups: dict[str, list[dict[str, Any]]] = {}
    for run in newest.values():
        r, res = run.resolved, run.results
        groups.setdefault(r["baseModel"], []).append(
            {
                "model": r["model"],
                "modelId": r["modelId"],
                "source": r.get("modelSource"),
                "mean": res.get("mean"),
                "stderr": res.get("stderr"),
                "count": res.get("count"),
                "errors": res.get("errors"),
                "evaluationId": run.id,
                "finishedAt": run.finished_at.isoformat() if run.finished_at else None,
            }
        )
    rows = []
    for base in sorted(groups):
        models = sorted(groups[base], key=lambda m: (-(m["mean"] or 0.0), m["model"]))
        rows.append({"baseModel": base, "repository": _repository(s, base), "models": models})
    view = settings_view(cfg) or {}
    return {
        "project": project.name,
        "dataset": view.get("dataset"),
        "grader": view.get("grader"),
        "sampling": view.get("sampling"),
        "rows": rows,
    }

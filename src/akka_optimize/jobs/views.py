"""What the API shows of a run: its view, lists, metrics and snapshots (seeds/001)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ..db.base import utcnow
from ..db.models.jobs import Run, RunMetric, Snapshot
from ..db.models.projects import Project
from . import states as S


def _iso(t: dt.datetime | None) -> str | None:
    return t.isoformat() if t else None


def project_fields(session: Session, name: str) -> dict[str, Any]:
    """``project`` (the name, as before), ``projectId`` and ``projectName`` of a record of
    project ``name`` (F057: text shows the name, JSON keeps the ID too); ``projectId`` is
    None when the project is gone."""
    pid = session.scalar(select(Project.id).where(Project.name == name))
    return {"project": name, "projectId": pid, "projectName": name}


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
        **project_fields(session, run.project),
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
        **(_reward(run) if run.method == "rl" else {}),
        "claims": (run.resolved or {}).get("claims"),
        "results": _results(run, res),
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
    if run.method == "recipe":  # core/recipes/runs.py: its computation and outputs
        view["recipe"] = {**(run.resolved or {}).get("computation", {}), **res.get("recipe", {})}
    return view


def _reward(run: Run) -> dict[str, Any]:
    """A reinforcement run's pinned reward and, for a judge, its instructions and their
    source (seeds/001 "training runs get show the instructions given to the judge")."""
    r = run.resolved or {}
    g = r.get("grader") or {}
    res = run.results or {}
    return {
        "reward": g.get("spec"),
        "rewardBundle": g.get("bundle"),
        "judge": g.get("judge"),
        "judgeEndpoint": res.get("judgeEndpoint"),
        "graderInstructions": r.get("graderInstructions"),
        "instructionsSource": r.get("instructionsSource"),
    }


def _results(run: Run, res: dict[str, Any]) -> dict[str, Any]:
    return {
        "rewardStart": res.get("rewardStart"),
        "rewardFinal": res.get("rewardFinal"),
        "model": run.registered_model,
        "step": run.current_step,
        "totalSteps": run.total_steps,
        "lastSavedStep": run.last_saved_step,
        "finalLoss": res.get("finalLoss"),
        "meanLoss": res.get("meanLoss"),
        "validationLoss": res.get("validationLoss"),
        "adaptedModules": res.get("adaptedModules"),
        "warnings": res.get("warnings"),
        "tokensPerSecond": res.get("tokensPerSecond"),
        "data": res.get("data"),
        "epochModels": res.get("epochModels"),
        "smoke": res.get("smoke"),
        "unrecordedSaves": res.get("unrecordedSaves"),
        "preparing": res.get("preparing"),
        # the checks before the first update (issue 23; runs get --checks)
        "checks": res.get("checks"),
        "checksPassed": res.get("checksPassed"),
        "ended": res.get("ended"),  # why a Tinker training client ended (tinker/kind.py)
        "trainedAnswers": res.get("trainedAnswers"),  # served = trained (jobs/training.py)
    }


def list_runs(session: Session, project: str | None = None, limit: int = 100) -> list[dict]:
    """Newest runs first, optionally in one project. Evaluations, comparisons and
    curations (methods ``eval``, ``compare`` and ``curate``, listed by their own routes)
    are not runs of a plan and are left out."""
    q = (
        select(Run)
        .where(Run.method.not_in(("eval", "compare", "curate")))
        .order_by(Run.created_at.desc())
        .limit(limit)
    )
    if project:
        q = q.where(Run.project == project)
    return [run_view(session, r) for r in session.scalars(q)]


def metrics(session: Session, run: Run) -> dict[str, Any]:
    """Per-update metrics, validation records and a smoke run's readings (``smoke``); a
    step retrained after a resume shows its newest attempt's values."""
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
        "smoke": [out["smoke"][k] for k in sorted(out.get("smoke", {}))],
        "finalLoss": (run.results or {}).get("finalLoss"),
        "meanLoss": (run.results or {}).get("meanLoss"),
        "warnings": (run.results or {}).get("warnings") or [],
    }


def samples(session: Session, run: Run, step: int | None = None) -> dict[str, Any]:
    """A reinforcement run's shown samples per update (prompt, completion, reward,
    advantage, error), oldest update first, or of update ``step`` only; a step sampled
    again after a resume shows its newest attempt's."""
    q = select(RunMetric).where(RunMetric.run_id == run.id, RunMetric.kind == "samples")
    if step is not None:
        q = q.where(RunMetric.step == step)
    by_step: dict[int, dict[str, Any]] = {}
    for m in session.scalars(q.order_by(RunMetric.attempt, RunMetric.id)):
        by_step[m.step] = {"step": m.step, "attempt": m.attempt, **m.values}
    return {"run": run.id, "updates": [by_step[k] for k in sorted(by_step)]}


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
